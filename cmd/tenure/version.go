package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// versionCmd is `tenure version`.
type versionCmd struct{ json bool }

func (*versionCmd) spec() *cobra.Command {
	return &cobra.Command{
		Use:   "version [flags]",
		Short: "print the version, commit and Go version this binary was built from",
		Long: `Print what the Go toolchain recorded in this binary: the module and its
version ("(devel)" when built from a checkout), the commit, its time and
whether the checkout had local changes, and the Go version.`,
	}
}

func (c *versionCmd) define(fs *pflag.FlagSet) {
	fs.BoolVar(&c.json, "json", false, "print JSON (for scripts) instead of text")
}

func (c *versionCmd) run(_ context.Context, a *app, _ *pflag.FlagSet, _ []string) error {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return fmt.Errorf("this binary carries no build information (was it built without module support?)")
	}
	v := versionOf(bi)
	if c.json {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(a.stdout, string(b))
		return err
	}
	w := table(a.stdout)
	fmt.Fprintf(w, "tenure %s\n", v.Version)
	fmt.Fprintf(w, "module\t%s\n", v.Module)
	if v.Revision != "" {
		commit := v.Revision
		if v.Modified {
			commit += " (with local changes)"
		}
		fmt.Fprintf(w, "commit\t%s\n", commit)
	}
	if v.Time != "" {
		fmt.Fprintf(w, "commit time\t%s\n", v.Time)
	}
	fmt.Fprintf(w, "go\t%s\n", v.Go)
	return w.Flush()
}

// version is what `tenure version` prints.
type version struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
}

// versionOf reads the version from build information.
func versionOf(bi *debug.BuildInfo) version {
	v := version{Module: bi.Main.Path, Version: bi.Main.Version, Go: bi.GoVersion}
	if v.Module == "" { // a test binary
		v.Module = bi.Path
	}
	if v.Version == "" {
		v.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}
