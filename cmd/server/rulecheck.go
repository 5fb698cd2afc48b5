package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/floodgate/floodgate/pkg/rules"
)

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
	limits := 0
	perDomain := map[string][2]int{} // rules, limits
	all := set.Rules()
	for _, r := range all {
		c := perDomain[r.Domain]
		c[0]++
		c[1] += len(r.Limits)
		perDomain[r.Domain] = c
		limits += len(r.Limits)
	}
	domains := set.Domains()
	for _, d := range domains {
		c := perDomain[d]
		fmt.Fprintf(w, "domain %s: %s, %s\n", d, plural(c[0], "rule"), plural(c[1], "limit"))
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
