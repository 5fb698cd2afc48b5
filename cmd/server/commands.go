package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/floodgate/floodgate/internal/settings"
	"github.com/floodgate/floodgate/pkg/rules"
)

// check validates the rules (-check) and exits 0 or 1.
func check(stdout io.Writer, out *logOutput, cfg *settings.Config) int {
	if err := unreadableRules(cfg, "floodgate check FILE_OR_DIR"); err != nil {
		out.fatal(err, "")
		return 1
	}
	if checkRules(stdout, cfg.Rules.Path, cfg.Rules.Options) != nil {
		return 1
	}
	return 0
}

// explain prints which rule -explain's descriptor matches.
func explain(stdout io.Writer, out *logOutput, cfg *settings.Config) int {
	if err := unreadableRules(cfg, "floodgate explain -config FILE_OR_DIR domain key=value"); err != nil {
		out.fatal(err, "")
		return 1
	}
	set, err := rules.Load(cfg.Rules.Path, cfg.Rules.Options)
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
	report, _ := set.Explain(args[0], entries)
	fmt.Fprint(stdout, report)
	return 0
}

// unreadableRules is the error of check and explain when nothing is at
// the rule path, saying why; usage shows how to name the rules. Other
// errors are the loader's to report.
func unreadableRules(cfg *settings.Config, usage string) error {
	path := cfg.Rules.Path
	_, err := os.Stat(path)
	switch {
	case err == nil:
		return nil
	case bool(cfg.Rules.XDS):
		return fmt.Errorf("with -config-type grpc_xds_sotw (CONFIG_TYPE=GRPC_XDS_SOTW) the rules come from the xDS server %s, "+
			"which check and explain do not ask: they read rule files, and -config %s cannot be read (%w); "+
			"point -config at a copy of the pushed rules (a running server's debug listener serves them under /ui/xds/)",
			cfg.Rules.XDSOptions.ServerURL, path, err)
	case !errors.Is(err, fs.ErrNotExist):
		return nil
	}
	abs, _ := filepath.Abs(path)
	switch cfg.Rules.PathFrom {
	case "":
		return fmt.Errorf("no rules at %s: -config's default is the directory config where the command runs; "+
			"name the rule file or directory: %s", abs, usage)
	case "-config":
		return fmt.Errorf("no rule file or directory at %s", abs)
	}
	return fmt.Errorf("no rule file or directory at %s (from %s)", abs, cfg.Rules.PathFrom)
}

// checkRules loads path as rules.Load does and writes to w either a summary
// of the set (files, domains, rules, limits and warnings) or every error,
// one per line. It returns Load's error.
func checkRules(w io.Writer, path string, opts rules.Options) error {
	set, err := rules.Load(path, opts)
	if err != nil {
		var le *rules.LoadError
		if errors.As(err, &le) {
			for _, fe := range le.Errors {
				fmt.Fprintln(w, fe.Error())
			}
			fmt.Fprintf(w, "%s: %s, rules refused\n", path, plural(len(le.Errors), "error"))
		} else {
			fmt.Fprintf(w, "%s: %v\n", path, err)
		}
		return err
	}
	warnings := set.Warnings()
	for _, wn := range warnings {
		fmt.Fprintf(w, "warning: %s\n", wn)
	}
	limits, rulesIn, limitsIn := 0, map[string]int{}, map[string]int{}
	all := set.Rules()
	for _, r := range all {
		rulesIn[r.Domain]++
		limitsIn[r.Domain] += len(r.Limits)
		limits += len(r.Limits)
	}
	domains := set.Domains()
	for _, d := range domains {
		fmt.Fprintf(w, "domain %s: %s, %s\n", d, plural(rulesIn[d], "rule"), plural(limitsIn[d], "limit"))
	}
	fmt.Fprintf(w, "%s: OK: %s, %s, %s, %s, %s\n", path,
		plural(set.Files(), "file"), plural(len(domains), "domain"), plural(len(all), "rule"),
		plural(limits, "limit"), plural(len(warnings), "warning"))
	return nil
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
