package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// The shape of a token: tnr_<id>_<secret> (doc.go).
const (
	tokenPrefix  = "tnr_"
	idBytes      = 6
	idLen        = 2 * idBytes
	secretBytes  = 32
	secretLen    = 43 // base64url of 32 bytes, unpadded
	tokenLen     = len(tokenPrefix) + idLen + 1 + secretLen
	tokenExample = "tnr_ followed by 56 characters"
)

// NewToken returns a new random token and its id.
func NewToken() (token, id string) {
	var b [idBytes + secretBytes]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	id = hex.EncodeToString(b[:idBytes])
	return tokenPrefix + id + "_" + base64.RawURLEncoding.EncodeToString(b[idBytes:]), id
}

// Hash is the SHA-256 of a whole token, as the token file stores it.
type Hash [sha256.Size]byte

// HashOf returns the hash of token.
func HashOf(token string) Hash { return sha256.Sum256([]byte(token)) }

// TokenID returns the id of a token of tenure's shape, or an error saying
// what is wrong with it. It never repeats the token, which is a secret.
func TokenID(token string) (string, error) {
	if !strings.HasPrefix(token, tokenPrefix) {
		return "", errors.New("the bearer token is not a tenure token: tenure's start with tnr_; pass the token `tenure token create` printed")
	}
	if len(token) != tokenLen || token[len(tokenPrefix)+idLen] != '_' {
		return "", fmt.Errorf("the bearer token is %d characters, not a tenure token's %d (%s): pass it whole, as `tenure token create` printed it", len(token), tokenLen, tokenExample)
	}
	id := token[len(tokenPrefix) : len(tokenPrefix)+idLen]
	if !isLowerHex(id) {
		return "", errors.New("the bearer token's id (the 12 characters after tnr_) is not lowercase hex: pass the token as `tenure token create` printed it")
	}
	if _, err := base64.RawURLEncoding.Strict().DecodeString(token[len(tokenPrefix)+idLen+1:]); err != nil {
		return "", errors.New("the bearer token's secret (after the second _) is not unpadded base64url: pass the token as `tenure token create` printed it")
	}
	return id, nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ErrNoToken is the error of a request without an Authorization header.
var ErrNoToken = errors.New("no token: send the header Authorization: Bearer <token> (tenure CLI: --token or TENURE_TOKEN; Go SDK: client.Options.Token)")

// ParseAuthorization returns the bearer token of one Authorization header
// value ("Bearer <token>", the scheme in any case), or an error that says
// what is wrong without repeating the value, which may hold a secret.
// The token's own shape is checked by TokenID.
func ParseAuthorization(value string) (string, error) {
	if value == "" {
		return "", ErrNoToken
	}
	scheme, rest, ok := strings.Cut(value, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		if strings.HasPrefix(value, tokenPrefix) {
			return "", errors.New("the Authorization header holds a token without its scheme: send Authorization: Bearer <token>")
		}
		return "", errors.New("the Authorization header is not a bearer token: send Authorization: Bearer <token>")
	}
	token := strings.Trim(rest, " \t")
	if token == "" {
		return "", errors.New("the Authorization header has no token after Bearer: send Authorization: Bearer <token>")
	}
	if strings.ContainsAny(token, " \t") {
		return "", errors.New("the Authorization header holds more than one word after Bearer: send Authorization: Bearer <token>")
	}
	return token, nil
}
