package main

import (
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"

	"github.com/floodgate/floodgate/internal/settings"
)

// logOutput is where the program reports, in the log format asked for,
// with every credential it knows of hidden.
type logOutput struct {
	w      io.Writer
	json   bool
	hide   *redactor
	logger *slog.Logger
}

// newLogOutput returns the output for format ("json", else text) at level,
// hiding secrets.
func newLogOutput(w io.Writer, format string, level slog.Leveler, hide *redactor) *logOutput {
	o := &logOutput{w: w, json: format == "json", hide: hide}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: o.replaceAttr}
	if o.json {
		o.logger = slog.New(slog.NewJSONHandler(w, opts))
	} else {
		o.logger = slog.New(slog.NewTextHandler(w, opts))
	}
	return o
}

// replaceAttr hides credentials in every message and attribute, and
// writes durations as "1.5s" in JSON, where slog would give nanoseconds.
func (o *logOutput) replaceAttr(_ []string, a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindDuration:
		if o.json {
			return slog.String(a.Key, v.Duration().String())
		}
	case slog.KindString:
		if h := o.hide.in(v.String()); h != v.String() {
			return slog.String(a.Key, h)
		}
	case slog.KindAny:
		err, isErr := v.Any().(error)
		s := fmt.Sprint(v.Any())
		if isErr {
			s = err.Error()
		}
		if h := o.hide.in(s); h != s || isErr {
			return slog.String(a.Key, h)
		}
	}
	return a
}

// fatal reports err, which ends the program: a JSON line in JSON, else
// "floodgate: err" (which may span lines, such as a list of rule errors).
// hint, if any, says what to do next.
func (o *logOutput) fatal(err error, hint string) {
	if o.json {
		args := []any{"err", err}
		if hint != "" {
			args = append(args, "hint", hint)
		}
		o.logger.Error("refusing to start", args...)
		return
	}
	msg := err.Error()
	if hint != "" {
		msg += " (" + hint + ")"
	}
	fmt.Fprintf(o.w, "floodgate: %s\n", o.hide.in(msg))
}

// redactor hides credentials in text: the password of any URL and each
// known secret, which may appear bare in a driver's message.
type redactor struct {
	secrets []string
}

// urlPassword matches the password of a URL's user information.
var urlPassword = regexp.MustCompile(`(://[^/\s:@"',]*):[^/\s@"',]*@`)

// minSecret is the shortest secret hidden wherever it appears; a shorter
// one would blank out common words, and is only hidden inside URLs.
const minSecret = 3

// newRedactor returns a redactor hiding the credentials args and env
// give: secret settings' values and the passwords of URL settings.
func newRedactor(args []string, env settings.Lookup) *redactor {
	r := &redactor{}
	for i, a := range args {
		if strings.Contains(a, "://") {
			r.addURLs(a)
		}
		name, v, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if s := settings.Find(name); !strings.HasPrefix(a, "-") || s == nil || !s.Secret {
			continue
		}
		if !hasValue && i+1 < len(args) {
			v = args[i+1]
		}
		r.addAuth(v)
	}
	for i := range settings.Table {
		s := &settings.Table[i]
		for _, n := range s.Vars() {
			v, ok := env(n)
			switch {
			case !ok:
			case s.Secret:
				r.addAuth(v)
			case s.URL:
				r.addURLs(v)
			}
		}
	}
	// Longest first, so that "user:pass" goes before "pass".
	slices.SortFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
	return r
}

// add hides v wherever it appears, unless it is too short to be told from
// common words.
func (r *redactor) add(v string) {
	if len(v) >= minSecret && !slices.Contains(r.secrets, v) {
		r.secrets = append(r.secrets, v)
	}
}

// addAuth hides a credential: "password", or "user:password" and its
// password alone.
func (r *redactor) addAuth(v string) {
	r.add(v)
	if _, pass, ok := strings.Cut(v, ":"); ok {
		r.add(pass)
	}
}

// addURLs hides the credentials of each comma-separated URL of v, with
// or without a scheme: user:password@host.
func (r *redactor) addURLs(v string) {
	for _, part := range strings.Split(v, ",") {
		rest := part
		if i := strings.Index(part, "://"); i >= 0 {
			rest = part[i+3:]
		}
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			r.addAuth(rest[:at])
		}
	}
}

// in returns s with the credentials hidden.
func (r *redactor) in(s string) string {
	s = urlPassword.ReplaceAllString(s, "$1:***@")
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, "***")
	}
	return s
}
