package main

import (
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/rules"
	"github.com/floodgate/floodgate/pkg/server"
)

// explained wraps a flag's value so that a value it cannot parse is
// refused with what it accepts ("want an integer"), from the command line
// and from the environment alike: the flag package's own errors say only
// "parse error".
type explained struct{ flag.Value }

// explainValues wraps every flag of fs in explained.
func explainValues(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) { f.Value = explained{f.Value} })
}

func (e explained) Set(s string) error {
	err := e.Value.Set(s)
	if err == nil {
		return nil
	}
	if want := wants(e.Value); want != "" {
		return fmt.Errorf("want %s", want)
	}
	return err
}

func (e explained) String() string {
	if e.Value == nil {
		// flag.isZeroValue calls String on a zero value of the type.
		return ""
	}
	return e.Value.String()
}

// IsBoolFlag keeps boolean flags usable without a value (-shadow-mode).
func (e explained) IsBoolFlag() bool {
	b, ok := e.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Get returns the wrapped value's, for flag.Getter.
func (e explained) Get() any {
	if g, ok := e.Value.(flag.Getter); ok {
		return g.Get()
	}
	return nil
}

// wants describes the values of the flag package's own types; "" for ours,
// whose errors already say what they accept.
func wants(v flag.Value) string {
	g, ok := v.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case bool:
		return "true or false"
	case int, int64:
		return "an integer"
	case uint, uint64:
		return "a whole number, 0 or more"
	case float64:
		return "a number such as 0.8"
	case time.Duration:
		return "a duration such as 500ms, 10s or 1h30m"
	}
	return ""
}

// valueType names the kind of value a flag takes in the usage, "" for a
// boolean (given without a value).
func valueType(v flag.Value) string {
	if e, ok := v.(explained); ok {
		v = e.Value
	}
	switch v.(type) {
	case *levelValue:
		return "level"
	case *failureValue:
		return "mode"
	case *styleValue:
		return "style"
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
	case uint, uint64:
		return "uint"
	case float64:
		return "float"
	case time.Duration:
		return "duration"
	}
	return "string"
}

// levelValue is a flag.Value for slog levels, read without regard to case
// as logrus reads the reference server's LOG_LEVEL, with its names
// (trace, warning, fatal, panic) mapped to the nearest.
type levelValue slog.Level

func (l *levelValue) String() string { return slog.Level(*l).String() }

func (l *levelValue) Set(s string) error {
	switch strings.ToLower(s) {
	case "trace", "debug":
		*l = levelValue(slog.LevelDebug)
	case "info":
		*l = levelValue(slog.LevelInfo)
	case "warn", "warning":
		*l = levelValue(slog.LevelWarn)
	case "error", "fatal", "panic":
		*l = levelValue(slog.LevelError)
	default:
		return fmt.Errorf("unknown log level %q (want debug, info, warn or error)", s)
	}
	return nil
}

// readinessValue is a flag.Value for server.StoreReadiness.
type readinessValue server.StoreReadiness

func (r *readinessValue) String() string { return server.StoreReadiness(*r).String() }

func (r *readinessValue) Set(s string) error {
	m, err := server.ParseStoreReadiness(s)
	if err == nil {
		*r = readinessValue(m)
	}
	return err
}

// failureValue is a flag.Value for the global failure mode.
type failureValue rules.FailureMode

func (f *failureValue) String() string {
	if f == nil || rules.FailureMode(*f) == rules.FailureDefault {
		return rules.FailureAllow.String()
	}
	return rules.FailureMode(*f).String()
}

func (f *failureValue) Set(s string) error {
	for _, m := range []rules.FailureMode{rules.FailureAllow, rules.FailureDeny, rules.FailureUnavailable} {
		if strings.EqualFold(s, m.String()) {
			*f = failureValue(m)
			return nil
		}
	}
	return fmt.Errorf("unknown failure mode %q (want allow, deny or unavailable)", s)
}

// styleValue is a flag.Value for the response header style.
type styleValue envoy.HeaderStyle

func (s *styleValue) String() string { return envoy.HeaderStyle(*s).String() }

func (s *styleValue) Set(v string) error {
	st, err := envoy.ParseHeaderStyle(v)
	if err == nil {
		*s = styleValue(st)
	}
	return err
}
