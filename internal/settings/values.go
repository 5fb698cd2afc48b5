package settings

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/internal/server"
	"github.com/floodgate/floodgate/internal/statsd"
)

// The flag.Values of the field types, as the flag package reads them, each
// able to say what it accepts (explained).

type stringValue string

func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }
func (v *stringValue) String() string     { return string(*v) }
func (v *stringValue) Get() any           { return string(*v) }

type boolValue bool

func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	*v = boolValue(b)
	return nil
}
func (v *boolValue) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) Get() any         { return bool(*v) }
func (v *boolValue) IsBoolFlag() bool { return true }

type intValue int

func (v *intValue) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, strconv.IntSize)
	if err != nil {
		return errors.New("want an integer")
	}
	*v = intValue(n)
	return nil
}
func (v *intValue) String() string { return strconv.Itoa(int(*v)) }
func (v *intValue) Get() any       { return int(*v) }

type int64Value int64

func (v *int64Value) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return errors.New("want an integer")
	}
	*v = int64Value(n)
	return nil
}
func (v *int64Value) String() string { return strconv.FormatInt(int64(*v), 10) }
func (v *int64Value) Get() any       { return int64(*v) }

type floatValue float64

func (v *floatValue) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return errors.New("want a number such as 0.8")
	}
	*v = floatValue(f)
	return nil
}
func (v *floatValue) String() string { return strconv.FormatFloat(float64(*v), 'g', -1, 64) }
func (v *floatValue) Get() any       { return float64(*v) }

type durationValue time.Duration

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want a duration such as 500ms, 10s or 1h30m")
	}
	*v = durationValue(d)
	return nil
}
func (v *durationValue) String() string { return time.Duration(*v).String() }
func (v *durationValue) Get() any       { return time.Duration(*v) }

// textFlag is the flag.Value of a field that reads itself as text.
type textFlag struct{ v textValue }

func (t textFlag) Set(s string) error { return t.v.UnmarshalText([]byte(s)) }

func (t textFlag) String() string {
	if t.v == nil {
		return ""
	}
	b, _ := t.v.MarshalText()
	return string(b)
}

// explained wraps a flag's value so that the flag package's own
// reporting stays out of the way: errors say what the value accepts, from
// the command line and from the environment alike.
type explained struct{ flag.Value }

// String is the wrapped value's; "" for a zero explained, which the flag
// package builds to tell a zero default.
func (e explained) String() string {
	if e.Value == nil {
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

// invertedBool is a boolean flag stored as its negation: -deny-cache
// (true by default) into DenyCache.Disabled.
type invertedBool struct{ p *bool }

func (v invertedBool) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	*v.p = !b
	return nil
}

func (v invertedBool) String() string {
	if v.p == nil {
		return "false"
	}
	return strconv.FormatBool(!*v.p)
}
func (v invertedBool) Get() any         { return v.p == nil || !*v.p }
func (v invertedBool) IsBoolFlag() bool { return true }

// pairs is a flag of "k1<sep>v1,k2<sep>v2" into a map; blank entries are
// skipped, an entry without sep is refused.
type pairs struct {
	m   *map[string]string
	sep string
	raw *string // as given, for String
}

func newPairs(m *map[string]string, sep string) *pairs {
	return &pairs{m: m, sep: sep, raw: new(string)}
}

func (p *pairs) Set(s string) error {
	out := map[string]string{}
	for _, e := range strings.Split(s, ",") {
		if strings.TrimSpace(e) == "" {
			continue
		}
		k, v, ok := strings.Cut(e, p.sep)
		if k = strings.TrimSpace(k); !ok || k == "" {
			return fmt.Errorf("entry %q: want key%svalue", e, p.sep)
		}
		out[k] = strings.TrimSpace(v)
	}
	*p.m, *p.raw = out, s
	return nil
}

func (p *pairs) String() string {
	if p == nil || p.raw == nil {
		return ""
	}
	return *p.raw
}
func (p *pairs) Get() any { return p.String() }

// errWant is an error saying what a value accepts: "want X", or, with a
// format, "<format> (want X)".
func errWant(want string, format ...any) error {
	if len(format) == 0 {
		return errors.New("want " + want)
	}
	return fmt.Errorf(format[0].(string)+" (want %s)", append(format[1:], want)...)
}

// requiresStore is -health-requires-store: true makes health follow the
// store always (server.StoreAlways), as -store-readiness always does; false
// leaves -store-readiness alone.
type requiresStore struct{ p *server.StoreReadiness }

func (v requiresStore) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	if b {
		*v.p = server.StoreAlways
	}
	return nil
}

func (v requiresStore) String() string {
	return strconv.FormatBool(v.p != nil && *v.p == server.StoreAlways)
}
func (v requiresStore) Get() any         { return v.p != nil && *v.p == server.StoreAlways }
func (v requiresStore) IsBoolFlag() bool { return true }

// tagsValue is -statsd-tags: k1:v1,k2:v2, parsed as the statsd package
// reads the reference's EXTRA_TAGS.
type tagsValue struct {
	p   *[]statsd.Tag
	raw string
}

func (v *tagsValue) Set(s string) error {
	tags, err := statsd.ParseTags(s)
	if err != nil {
		return err
	}
	*v.p, v.raw = tags, s
	return nil
}

func (v *tagsValue) String() string {
	if v == nil {
		return ""
	}
	return v.raw
}
func (v *tagsValue) Get() any { return v.String() }

// mogrifiersValue is -dogstatsd-mogrifiers: the names whose
// DOG_STATSD_MOGRIFIER_<NAME>_* variables, read from env, rename and tag
// the DogStatsD stats, as the reference's USE_DOG_STATSD_MOGRIFIERS.
type mogrifiersValue struct {
	p   *[]statsd.Mogrifier
	env Lookup
	raw string
}

func (v *mogrifiersValue) Set(s string) error {
	ms, err := statsd.MogrifiersFromEnv(s, v.env)
	if err != nil {
		return err
	}
	*v.p, v.raw = ms, s
	return nil
}

func (v *mogrifiersValue) String() string {
	if v == nil {
		return ""
	}
	return v.raw
}
func (v *mogrifiersValue) Get() any { return v.String() }

// retired is a setting that no longer lands anywhere: a value given is
// accepted, so that a deployment that set it still starts, and noted at
// start with the setting that took its place.
type retired struct {
	c         *Config
	flag, now string
}

func (v retired) Set(s string) error {
	v.c.Notes = append(v.c.Notes, fmt.Sprintf("-%s (%s) is retired: %s is ignored, %s applies", v.flag, (&Setting{Flag: v.flag}).Var(), s, v.now))
	return nil
}

func (v retired) String() string { return "" }
func (v retired) Get() any       { return nil }
