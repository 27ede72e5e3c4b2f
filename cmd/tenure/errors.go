package main

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tenurehq/tenure/sdk/client"
)

// errorText is what the command line says of a command's error: for a
// call the server (or the client) refused, its message without the
// client's prefixes ("client: Submit: …"), with the field of a refused
// request named as the command's flag or argument (--window for
// execution_window); any other error as it is.
func errorText(cmd *cobra.Command, err error) string {
	var ce *client.Error
	if !errors.As(err, &ce) {
		return err.Error()
	}
	msg := strings.TrimPrefix(err.Error(), "client: "+ce.Op+": ")
	if ce.Field == "" {
		return msg
	}
	name := flagOf(cmd, ce.Field)
	if name == ce.Field {
		return msg
	}
	// "invalid argument: execution_window: 50ms is outside …" becomes
	// "--window: 50ms is outside …": the flag says what was invalid.
	for _, prefix := range []string{"invalid argument: " + ce.Field + ": ", ce.Field + ": "} {
		if rest, ok := strings.CutPrefix(msg, prefix); ok {
			return name + ": " + rest
		}
	}
	// "too large: payload is 2000000 bytes, …": the field inside.
	return strings.Replace(msg, " "+ce.Field+" ", " "+name+" ", 1)
}

// fieldFlags are the API's fields whose flags are not named after them.
var fieldFlags = map[string]string{
	"execution_window":          "window",
	"retry_policy.max_attempts": "max-attempts",
	"not_before":                "delay",
	"start":                     "from",
	"end":                       "to",
	"catch_up_window":           "catch-up",
	"page_size":                 "limit",
}

// flagOf names the API field of a refused request as cmd takes it: a flag
// (--window), an argument of its usage line (NAME, TASK_ID, PAYLOAD), or
// the field itself if cmd takes it neither way.
func flagOf(cmd *cobra.Command, field string) string {
	has := func(name string) bool { return name != "" && cmd.Flags().Lookup(name) != nil }
	if f := fieldFlags[field]; has(f) {
		return "--" + f
	}
	last := field[strings.LastIndexByte(field, '.')+1:]
	if f := strings.ReplaceAll(last, "_", "-"); has(f) {
		return "--" + f
	}
	arg := strings.ToUpper(last)
	if slices.Contains(strings.FieldsFunc(cmd.Use, func(r rune) bool { return !(r == '_' || r >= 'A' && r <= 'Z') }), arg) {
		return "the " + arg + " argument"
	}
	return field
}

// addrHint says what to do when no server answered at the command's
// address (--addr): the connection was refused, or its host is unknown.
func addrHint(fs *pflag.FlagSet, err error) string {
	f := fs.Lookup("addr")
	if f == nil {
		return ""
	}
	var dns *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("no server answers at %s: start one (tenure server), or point --addr (or TENURE_ADDR) at yours", f.Value)
	case errors.As(err, &dns) && dns.IsNotFound:
		return fmt.Sprintf("the host of %s is unknown: check --addr (or TENURE_ADDR)", f.Value)
	}
	return ""
}
