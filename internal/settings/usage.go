package settings

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// PrintFlags writes every flag of -h by section, sorted within each, with
// its default and the variables that set it.
func PrintFlags(w io.Writer) {
	var c Config
	fs := flagSet(&c, func(string) (string, bool) { return "", false })
	for _, rows := range sections {
		fmt.Fprintf(w, "\n%s:\n", rows[0].Group)
		rows = slices.SortedFunc(slices.Values(rows), func(a, b Setting) int { return strings.Compare(a.Flag, b.Flag) })
		for i := range rows {
			s := &rows[i]
			f := fs.Lookup(s.Flag)
			line := "  -" + s.Flag
			if t := s.typeName(f.Value); t != "" {
				line += " " + t
			}
			if s.At == nil { // retired: no default to show
				fmt.Fprintf(w, "%s\n    \t%s\n", line, s.Usage)
			} else {
				fmt.Fprintf(w, "%s\n    \t%s (default %s)\n", line, s.Usage, s.shownDefault(f))
			}
			if vars := s.Vars(); len(vars) > 0 {
				fmt.Fprintf(w, "    \tenv: %s\n", strings.Join(vars, ", "))
			}
		}
	}
}

// typeName names the value a flag takes in -h: Setting.Type, else from
// the field's type; "" for a boolean (given without a value).
func (s *Setting) typeName(v flag.Value) string {
	if s.Type != "" {
		return s.Type
	}
	g, ok := v.(flag.Getter)
	if !ok {
		return "value"
	}
	switch g.Get().(type) {
	case bool:
		return ""
	case int, int64:
		return "int"
	case float64:
		return "float"
	case time.Duration:
		return "duration"
	case string:
		return "string"
	}
	return "value"
}

// shownDefault is the default as -h shows it: quoted when a string or
// empty.
func (s *Setting) shownDefault(f *flag.Flag) string {
	if s.typeName(f.Value) == "string" || f.DefValue == "" {
		return fmt.Sprintf("%q", f.DefValue)
	}
	return f.DefValue
}

// Vars lists the variables that set s, in precedence order: its own, the
// reference server's, then FLOODGATE_DEFAULT_CONFIG for -config, marked
// "(lowest)". None for a command.
func (s *Setting) Vars() []string {
	if s.Command {
		return nil
	}
	vars := []string{floodgateVar(s.Flag)}
	for _, r := range References {
		if r.Flag == s.Flag {
			vars = append(vars, r.Name)
		}
	}
	if s.Flag == "config" {
		vars = append(vars, DefaultConfigVar+" (lowest)")
	}
	return vars
}
