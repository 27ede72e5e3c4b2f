package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/tenurehq/tenure/internal/auth"
	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/server"
)

// authFlags are the flags of `tenure server` about who may call it
// (docs/guides/security.md).
type authFlags struct {
	file     string
	insecure bool
}

func (f *authFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.file, "auth-file", envOr("TENURE_AUTH_FILE", ""), "token file (from tenure token create): every call then needs a bearer token; reread when it changes and on SIGHUP (env TENURE_AUTH_FILE)")
	fs.BoolVar(&f.insecure, "insecure", false, "serve without --auth-file on an address that is not loopback: anyone who reaches it may do anything")
}

// setup returns the authenticator of --auth-file (nil without it), which
// is reloaded on SIGHUP until ctx ends. Without a token file it refuses a
// --listen address that is not loopback, unless --insecure.
func (f *authFlags) setup(ctx context.Context, listen string, clk clock.Clock, lg *slog.Logger) (server.Authenticator, error) {
	if f.file == "" {
		if loopbackListen(listen) {
			return nil, nil
		}
		if !f.insecure {
			return nil, fmt.Errorf("refusing to serve on %s without authentication, where anyone who reaches it could submit, lease and kill tasks: "+
				"pass --auth-file FILE (tokens from tenure token create), or --insecure on a network you trust", listen)
		}
		lg.Warn("serving without authentication on an address that is not loopback (--insecure): anyone who reaches it may submit, lease and kill tasks",
			"listen", listen)
		return nil, nil
	}
	if f.insecure {
		lg.Warn("--insecure has no effect with --auth-file: every call needs a token")
	}
	st, err := auth.Open(f.file, auth.StoreOptions{Clock: clk, Logger: lg})
	if err != nil {
		return nil, fmt.Errorf("--auth-file: %w", err)
	}
	n := len(st.Tokens().Entries)
	if n == 0 {
		lg.Warn("the token file has no token: every call will be refused until one is added (tenure token create)", "path", f.file)
	}
	lg.Info("authentication on: every call needs a bearer token", "auth_file", f.file, "tokens", n)
	onSIGHUP(ctx, func() { st.Reload() }) // Reload logs the outcome
	return st, nil
}

// onSIGHUP runs reload at every SIGHUP until ctx ends: how the server
// rereads its token file and its certificates without a restart.
func onSIGHUP(ctx context.Context, reload func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				reload()
			}
		}
	}()
}

// loopbackListen reports whether a --listen address takes connections
// from this host only: a loopback IP or "localhost". An address it cannot
// read counts as loopback, so that listening fails with its own error.
func loopbackListen(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return true
	}
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
