package main

import (
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"
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
		if s := v.String(); o.hide.changes(s) {
			return slog.String(a.Key, o.hide.in(s))
		}
	case slog.KindAny:
		var s string
		switch x := v.Any().(type) {
		case error:
			s = x.Error()
		case time.Duration:
			if o.json {
				return slog.String(a.Key, x.String())
			}
			return a
		default:
			s = fmt.Sprint(x)
		}
		if o.hide.changes(s) {
			return slog.String(a.Key, o.hide.in(s))
		}
		if _, isErr := v.Any().(error); isErr {
			return slog.String(a.Key, s)
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

// startFormat is the log format args and env ask for, read before they are
// parsed, so that an error in them is reported in that format: "json" when
// -log-format, FLOODGATE_LOG_FORMAT or LOG_FORMAT (in that order) says
// json in any case, else "text", including when the format itself is
// unreadable.
func startFormat(args []string, env lookupFunc) string {
	for i := 0; i < len(args); i++ {
		a := strings.TrimPrefix(strings.TrimPrefix(args[i], "-"), "-")
		if a == args[i] || a == "" {
			break // the first positional argument ends the flags
		}
		name, v, hasValue := strings.Cut(a, "=")
		if name != "log-format" {
			continue
		}
		if !hasValue && i+1 < len(args) {
			v = args[i+1]
		}
		return formatName(v)
	}
	for _, name := range []string{floodgateVar("log-format"), "LOG_FORMAT"} {
		if v, ok := env(name); ok && v != "" {
			return formatName(v)
		}
	}
	return "text"
}

func formatName(v string) string {
	if strings.EqualFold(v, "json") {
		return "json"
	}
	return "text"
}

// redactor hides credentials in text: the password of any URL
// (scheme://user:password@host) and each known secret (REDIS_AUTH's and
// the like, which may appear bare in a driver's message).
type redactor struct {
	secrets []string
}

// urlPassword matches the password of a URL's user information.
var urlPassword = regexp.MustCompile(`(://[^/\s:@"',]*):[^/\s@"',]*@`)

// minSecret is the shortest secret hidden wherever it appears; a shorter
// one would blank out common words, and is only hidden inside URLs.
const minSecret = 3

// newRedactor returns a redactor hiding the credentials given in args and
// env: the values of the flags and variables holding passwords, and the
// passwords of the URLs they hold.
func newRedactor(args []string, env lookupFunc) *redactor {
	r := &redactor{}
	add := func(v string) {
		if len(v) >= minSecret && !slices.Contains(r.secrets, v) {
			r.secrets = append(r.secrets, v)
		}
	}
	addAuth := func(v string) {
		add(v)
		if _, pass, ok := strings.Cut(v, ":"); ok {
			add(pass)
		}
	}
	addURLs := func(v string) {
		for _, part := range strings.Split(v, ",") {
			// With or without a scheme: user:password@host.
			rest := part
			if i := strings.Index(part, "://"); i >= 0 {
				rest = part[i+3:]
			}
			if at := strings.LastIndex(rest, "@"); at >= 0 {
				addAuth(rest[:at])
			}
		}
	}
	for i, a := range args {
		if strings.Contains(a, "://") {
			addURLs(a)
		}
		name, v, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !secretFlags[name] || !strings.HasPrefix(a, "-") {
			continue
		}
		if !hasValue && i+1 < len(args) {
			v = args[i+1]
		}
		addAuth(v)
	}
	for flag := range secretFlags {
		names := []string{floodgateVar(flag)}
		for _, r := range referenceVars {
			if r.flag == flag {
				names = append(names, r.name)
			}
		}
		for _, n := range names {
			if v, ok := env(n); ok {
				addAuth(v)
			}
		}
	}
	for _, n := range []string{"REDIS_URL", "REDIS_PERSECOND_URL", floodgateVar("redis"), floodgateVar("redis-persecond"),
		"MEMCACHE_HOST_PORT", floodgateVar("memcache"), "STATSD_HOST", floodgateVar("statsd-addr")} {
		if v, ok := env(n); ok {
			addURLs(v)
		}
	}
	// Longest first, so that "user:pass" goes before "pass".
	slices.SortFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
	return r
}

// in returns s with the credentials hidden.
func (r *redactor) in(s string) string {
	s = urlPassword.ReplaceAllString(s, "$1:***@")
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, "***")
	}
	return s
}

// changes reports whether in changes s.
func (r *redactor) changes(s string) bool { return r.in(s) != s }
