package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tenurehq/tenure/internal/auth"
)

// The commands of `tenure token`: they edit a server's token file
// (internal/auth/doc.go) directly; a running server picks the change up
// within a second.

// addAuthFileFlag defines --auth-file of the token commands.
func addAuthFileFlag(fs *pflag.FlagSet, p *string) {
	fs.StringVar(p, "auth-file", envOr("TENURE_AUTH_FILE", ""), "the server's token file (env TENURE_AUTH_FILE)")
}

// needAuthFile refuses a missing --auth-file.
func needAuthFile(path string) error {
	if path == "" {
		return usageError{"--auth-file (or TENURE_AUTH_FILE) is required: the token file the server is started with"}
	}
	return nil
}

// tokenCreateCmd is `tenure token create`.
type tokenCreateCmd struct {
	file, name, role   string
	namespaces, queues []string
}

func (*tokenCreateCmd) spec() *cobra.Command {
	return &cobra.Command{
		Use:   "create --auth-file F --name N --role R --namespace NS[,NS] [--queue Q[,Q]] [flags]",
		Short: "make a new token: print it once, and add its hash to the token file",
		Long: `Make a new random token, print it on stdout (once: it is stored nowhere,
only its SHA-256 is added to the token file) and add it to --auth-file,
which is created if missing. A server started with that file accepts the
token within a second, without a restart.

Roles: admin (every call), submitter (submit, and read the tasks of its
namespaces), worker (lease, start, heartbeat, commit, complete and fail the
tasks of its queues, and read them), reader (every read, and /metrics).
--namespace lists the namespaces the token may act in, or is * for every
one; --queue (worker tokens only, required for them) likewise lists queues.`,
		Example: `  tenure token create --auth-file tokens.jsonl --name ops --role admin --namespace '*'
  tenure token create --auth-file tokens.jsonl --name mailer --role worker --namespace default --queue emails,sms
  export TENURE_TOKEN=$(tenure token create --auth-file tokens.jsonl --name ci --role submitter --namespace default)`,
	}
}

func (c *tokenCreateCmd) define(fs *pflag.FlagSet) {
	addAuthFileFlag(fs, &c.file)
	fs.StringVar(&c.name, "name", "", "the token's name, unique in the file: recorded as who asked (letters, digits and ._@:-, at most 64)")
	fs.StringVar(&c.role, "role", "", "admin, submitter, worker or reader")
	fs.StringSliceVar(&c.namespaces, "namespace", nil, "namespaces it may act in, comma-separated, or * for every one")
	fs.StringSliceVar(&c.queues, "queue", nil, "worker tokens: queues it may work on, comma-separated, or * for every one")
}

func (*tokenCreateCmd) choices() map[string][]string {
	roles := make([]string, len(auth.Roles))
	for i, r := range auth.Roles {
		roles[i] = string(r)
	}
	return map[string][]string{"role": roles}
}

func (c *tokenCreateCmd) run(_ context.Context, a *app, _ *pflag.FlagSet, _ []string) error {
	if err := needAuthFile(c.file); err != nil {
		return err
	}
	if c.name == "" || c.role == "" || len(c.namespaces) == 0 {
		return usageError{"--name, --role and --namespace are required (--namespace '*' for every namespace)"}
	}
	role, err := auth.ParseRole(c.role)
	if err != nil {
		return usageError{"--role: " + err.Error()}
	}
	p := auth.Principal{Name: c.name, Role: role, Namespaces: c.namespaces, Queues: c.queues}
	if err := p.Validate(); err != nil {
		return usageError{err.Error()}
	}
	token, e, err := auth.Create(c.file, p, a.clock.Now())
	if err != nil {
		return err
	}
	fmt.Fprintln(a.stdout, token)
	fmt.Fprintf(a.stderr, "created token %q (%s) in %s; it is printed only this once: keep it secret (pass it as TENURE_TOKEN or --token); "+
		"a server using that file accepts it within a second\n", e.Name, scopeText(&e.Principal), c.file)
	return nil
}

// scopeText describes a principal's role and scope on one line.
func scopeText(p *auth.Principal) string {
	s := fmt.Sprintf("role %s, namespaces %s", p.Role, strings.Join(p.Namespaces, ","))
	if len(p.Queues) > 0 {
		s += ", queues " + strings.Join(p.Queues, ",")
	}
	return s
}

// tokenListCmd is `tenure token list`.
type tokenListCmd struct {
	file string
	json bool
}

func (*tokenListCmd) spec() *cobra.Command {
	return &cobra.Command{Use: "list --auth-file F [flags]", Short: "list the tokens of a token file: names, roles, scopes (never hashes)"}
}

func (c *tokenListCmd) define(fs *pflag.FlagSet) {
	addAuthFileFlag(fs, &c.file)
	fs.BoolVar(&c.json, "json", false, "print one JSON object per token (for scripts) instead of a table")
}

func (c *tokenListCmd) run(_ context.Context, a *app, _ *pflag.FlagSet, _ []string) error {
	if err := needAuthFile(c.file); err != nil {
		return err
	}
	t, err := auth.ReadFile(c.file)
	if err != nil {
		return err
	}
	if c.json {
		enc := json.NewEncoder(a.stdout)
		for _, e := range t.Entries {
			v := struct {
				Name       string    `json:"name"`
				Role       string    `json:"role"`
				Namespaces []string  `json:"namespaces"`
				Queues     []string  `json:"queues,omitempty"`
				ID         string    `json:"id"`
				Created    time.Time `json:"created,omitzero"`
			}{e.Name, string(e.Role), e.Namespaces, e.Queues, e.ID, e.Created}
			if err := enc.Encode(v); err != nil {
				return err
			}
		}
		return nil
	}
	tw := table(a.stdout)
	fmt.Fprintln(tw, "NAME\tROLE\tNAMESPACES\tQUEUES\tID\tCREATED")
	for _, e := range t.Entries {
		created := "-"
		if !e.Created.IsZero() {
			created = e.Created.UTC().Format(time.RFC3339)
		}
		queues := "-"
		if len(e.Queues) > 0 {
			queues = strings.Join(e.Queues, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\ttnr_%s_…\t%s\n", e.Name, e.Role, strings.Join(e.Namespaces, ","), queues, e.ID, created)
	}
	return tw.Flush()
}

// tokenRevokeCmd is `tenure token revoke`.
type tokenRevokeCmd struct{ file, name string }

func (*tokenRevokeCmd) spec() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke --auth-file F --name N [flags]",
		Short: "remove a token from a token file; a server using it refuses the token within a second",
	}
}

func (c *tokenRevokeCmd) define(fs *pflag.FlagSet) {
	addAuthFileFlag(fs, &c.file)
	fs.StringVar(&c.name, "name", "", "the token's name (tenure token list shows them)")
}

func (c *tokenRevokeCmd) run(_ context.Context, a *app, _ *pflag.FlagSet, _ []string) error {
	if err := needAuthFile(c.file); err != nil {
		return err
	}
	if c.name == "" {
		return usageError{"--name is required: the token to revoke (tenure token list shows them)"}
	}
	e, err := auth.Revoke(c.file, c.name)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "revoked token %q (%s) from %s; a server using that file refuses it within a second\n", e.Name, scopeText(&e.Principal), c.file)
	return nil
}
