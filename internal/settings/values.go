package settings

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/internal/server"
)

// scalar is the flag.Value of a field of a plain type: parse reads it,
// format writes it, and a value parse refuses gets the error want.
type scalar[T any] struct {
	p      *T
	parse  func(string) (T, error)
	format func(T) string
	want   string
}

func (v *scalar[T]) Set(s string) error {
	x, err := v.parse(s)
	if err != nil {
		return errors.New(v.want)
	}
	*v.p = x
	return nil
}
func (v *scalar[T]) String() string { return v.format(*v.p) }
func (v *scalar[T]) Get() any       { return *v.p }

// IsBoolFlag lets a boolean flag be given without a value (-shadow-mode).
func (v *scalar[T]) IsBoolFlag() bool {
	_, ok := any(v.p).(*bool)
	return ok
}

// scalarOf returns the flag.Value of the field at p when its type is a
// plain one, else nil.
func scalarOf(p any) flag.Value {
	switch p := p.(type) {
	case *string:
		return &scalar[string]{p, func(s string) (string, error) { return s, nil }, func(s string) string { return s }, ""}
	case *bool:
		return &scalar[bool]{p, strconv.ParseBool, strconv.FormatBool, "want true or false"}
	case *int:
		parse := func(s string) (int, error) {
			n, err := strconv.ParseInt(s, 0, strconv.IntSize)
			return int(n), err
		}
		return &scalar[int]{p, parse, strconv.Itoa, "want an integer"}
	case *int64:
		parse := func(s string) (int64, error) { return strconv.ParseInt(s, 0, 64) }
		format := func(n int64) string { return strconv.FormatInt(n, 10) }
		return &scalar[int64]{p, parse, format, "want an integer"}
	case *float64:
		parse := func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }
		format := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
		return &scalar[float64]{p, parse, format, "want a number such as 0.8"}
	case *time.Duration:
		return &scalar[time.Duration]{p, time.ParseDuration, time.Duration.String, "want a duration such as 500ms, 10s or 1h30m"}
	}
	return nil
}

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

// boolFunc is a boolean flag that lands through set and reads back
// through get: a field that holds its negation (inverted), or a value of
// another type (-health-requires-store).
type boolFunc struct {
	set func(bool)
	get func() bool
}

func (v boolFunc) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	v.set(b)
	return nil
}
func (v boolFunc) String() string   { return strconv.FormatBool(v.get()) }
func (v boolFunc) Get() any         { return v.get() }
func (v boolFunc) IsBoolFlag() bool { return true }

// inverted is a boolean flag stored as its negation: -deny-cache (true by
// default) into DenyCache.Disabled.
func inverted(p *bool) boolFunc {
	return boolFunc{set: func(b bool) { *p = !b }, get: func() bool { return !*p }}
}

// requiresStore is -health-requires-store: true makes health follow the
// store always (server.StoreAlways), as -store-readiness always does; false
// leaves -store-readiness alone.
func requiresStore(p *server.StoreReadiness) boolFunc {
	set := func(b bool) {
		if b {
			*p = server.StoreAlways
		}
	}
	return boolFunc{set: set, get: func() bool { return *p == server.StoreAlways }}
}

// parsed is a flag whose text parse reads into the field at p; it shows
// the text as given.
type parsed[T any] struct {
	p     *T
	parse func(string) (T, error)
	raw   string
}

func (v *parsed[T]) Set(s string) error {
	x, err := v.parse(s)
	if err != nil {
		return err
	}
	*v.p, v.raw = x, s
	return nil
}

func (v *parsed[T]) String() string {
	if v == nil {
		return ""
	}
	return v.raw
}
func (v *parsed[T]) Get() any { return v.String() }

// pairs is a flag of "k1<sep>v1,k2<sep>v2" into a map; blank entries are
// skipped, an entry without sep is refused.
func pairs(m *map[string]string, sep string) flag.Value {
	parse := func(s string) (map[string]string, error) {
		out := map[string]string{}
		for _, e := range strings.Split(s, ",") {
			if strings.TrimSpace(e) == "" {
				continue
			}
			k, v, ok := strings.Cut(e, sep)
			if k = strings.TrimSpace(k); !ok || k == "" {
				return nil, fmt.Errorf("entry %q: want key%svalue", e, sep)
			}
			out[k] = strings.TrimSpace(v)
		}
		return out, nil
	}
	return &parsed[map[string]string]{p: m, parse: parse}
}

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
