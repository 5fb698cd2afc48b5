package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/floodgate/floodgate/internal/settings"
	"github.com/floodgate/floodgate/pkg/rules"
)

// ruleOptions are the rule loader's options: the settings', and the
// store's word on which limits it serves (Memcached counts fixed windows
// only), so that other rules are refused at load.
func ruleOptions(cfg *settings.Config) rules.Options {
	opts := cfg.Rules.Options
	opts.Supports = cfg.Store.Supports
	return opts
}

// check validates the rules (-check) and exits 0 or 1.
func check(stdout io.Writer, out *logOutput, cfg *settings.Config) int {
	if err := offlineRules(cfg); err != nil {
		out.fatal(err, "")
		return 1
	}
	if rules.Check(stdout, cfg.Rules.Path, ruleOptions(cfg)) != nil {
		return 1
	}
	return 0
}

// explain prints which rule -explain's descriptor matches.
func explain(stdout io.Writer, out *logOutput, cfg *settings.Config) int {
	if err := offlineRules(cfg); err != nil {
		out.fatal(err, "")
		return 1
	}
	set, err := rules.Load(cfg.Rules.Path, ruleOptions(cfg))
	if err != nil {
		out.fatal(fmt.Errorf("cannot load the rules in %s:\n%w", cfg.Rules.Path, err), "")
		return 1
	}
	args := cfg.Command.Args
	var entries []rules.Entry
	for _, a := range args[1:] {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			out.fatal(fmt.Errorf("-explain entry %q: want key=value", a), flagHint)
			return 2
		}
		entries = append(entries, rules.Entry{Key: k, Value: v})
	}
	fmt.Fprint(stdout, set.Explain(args[0], entries).String())
	return 0
}

// offlineRules is the error of check and explain when the server takes its
// rules from an xDS server: they read rule files only, and with none at
// -config they would say "no such file" without saying why none is there.
func offlineRules(cfg *settings.Config) error {
	if !cfg.Rules.XDS {
		return nil
	}
	if _, err := os.Stat(cfg.Rules.Path); err != nil {
		return fmt.Errorf("with -config-type grpc_xds_sotw (CONFIG_TYPE=GRPC_XDS_SOTW) the rules come from the xDS server %s, "+
			"which check and explain do not ask: they read rule files, and -config %s cannot be read (%w); "+
			"point -config at a copy of the pushed rules (a running server's debug listener serves them under /ui/xds/)",
			cfg.Rules.XDSOptions.ServerURL, cfg.Rules.Path, err)
	}
	return nil
}
