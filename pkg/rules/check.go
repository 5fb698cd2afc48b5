package rules

import (
	"errors"
	"fmt"
	"io"
)

// Check loads path as Load does and writes to w either a summary of the set
// (files, domains, rules, limits and warnings) or every error, one per line.
// It returns Load's error. It is the whole of a check command.
func Check(w io.Writer, path string, opts Options) error {
	set, err := Load(path, opts)
	if err != nil {
		var le *LoadError
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
	for _, wn := range set.warnings {
		fmt.Fprintf(w, "warning: %s\n", wn)
	}
	limits := 0
	perDomain := map[string][2]int{} // rules, limits
	for _, r := range set.rules {
		c := perDomain[r.Domain]
		c[0]++
		c[1] += len(r.Limits)
		perDomain[r.Domain] = c
		limits += len(r.Limits)
	}
	for _, d := range set.names {
		c := perDomain[d]
		fmt.Fprintf(w, "domain %s: %s, %s\n", d, plural(c[0], "rule"), plural(c[1], "limit"))
	}
	fmt.Fprintf(w, "%s: OK: %s, %s, %s, %s, %s\n", path,
		plural(set.files, "file"), plural(len(set.names), "domain"), plural(len(set.rules), "rule"),
		plural(limits, "limit"), plural(len(set.warnings), "warning"))
	return nil
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
