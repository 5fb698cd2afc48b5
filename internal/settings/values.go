package settings

import (
	"encoding"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/internal/server"
)

// value is the flag.Value of the field at p: parse reads the text given,
// and show writes the field as -h shows its default; without show, the
// text last given is shown. A text parse refuses gets the error want, or
// parse's own when want is empty.
type value[T any] struct {
	p     *T
	parse func(string) (T, error)
	show  func(T) string
	want  string
	raw   string
}

func (v *value[T]) Set(s string) error {
	x, err := v.parse(s)
	switch {
	case err != nil && v.want != "":
		return errors.New(v.want)
	case err != nil:
		return err
	}
	*v.p, v.raw = x, s
	return nil
}

func (v *value[T]) String() string {
	if v.show == nil {
		return v.raw
	}
	return v.show(*v.p)
}

// Get returns the field, or without show the text given: -h names the
// flag's type after it.
func (v *value[T]) Get() any {
	if v.show == nil {
		return v.raw
	}
	return *v.p
}

// IsBoolFlag lets a boolean flag be given without a value (-shadow-mode).
func (v *value[T]) IsBoolFlag() bool {
	_, ok := any(v.p).(*bool)
	return ok
}

// textValue is a field whose type reads and writes itself as text (an
// enum of its package: rules.FailureMode, envoy.HeaderStyle, ...).
type textValue interface {
	encoding.TextUnmarshaler
	encoding.TextMarshaler
}

// fieldValue returns the flag.Value of the field at p when its type is a
// plain one or reads itself as text, else nil.
func fieldValue(p any) flag.Value {
	switch p := p.(type) {
	case *string:
		same := func(s string) string { return s }
		return &value[string]{p: p, parse: func(s string) (string, error) { return s, nil }, show: same}
	case *bool:
		return &value[bool]{p: p, parse: strconv.ParseBool, show: strconv.FormatBool, want: wantBool}
	case *int:
		parse := func(s string) (int, error) {
			n, err := strconv.ParseInt(s, 0, strconv.IntSize)
			return int(n), err
		}
		return &value[int]{p: p, parse: parse, show: strconv.Itoa, want: "want an integer"}
	case *int64:
		parse := func(s string) (int64, error) { return strconv.ParseInt(s, 0, 64) }
		show := func(n int64) string { return strconv.FormatInt(n, 10) }
		return &value[int64]{p: p, parse: parse, show: show, want: "want an integer"}
	case *float64:
		parse := func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }
		show := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
		return &value[float64]{p: p, parse: parse, show: show, want: "want a number such as 0.8"}
	case *time.Duration:
		return &value[time.Duration]{p: p, parse: time.ParseDuration, show: time.Duration.String,
			want: "want a duration such as 500ms, 10s or 1h30m"}
	case textValue:
		parse := func(s string) (textValue, error) { return p, p.UnmarshalText([]byte(s)) }
		show := func(t textValue) string {
			b, _ := t.MarshalText()
			return string(b)
		}
		return &value[textValue]{p: new(textValue(p)), parse: parse, show: show}
	}
	return nil
}

const wantBool = "want true or false"

// inverted is a boolean flag stored as its negation: -deny-cache (true by
// default) into DenyCache.Disabled.
func inverted(p *bool) flag.Value {
	parse := func(s string) (bool, error) {
		b, err := strconv.ParseBool(s)
		return !b, err
	}
	show := func(b bool) string { return strconv.FormatBool(!b) }
	return &value[bool]{p: p, parse: parse, show: show, want: wantBool}
}

// requiresStore is -health-requires-store: true makes health follow the
// store always (server.StoreAlways), as -store-readiness always does; false
// leaves -store-readiness alone.
func requiresStore(p *server.StoreReadiness) flag.Value {
	parse := func(s string) (bool, error) {
		b, err := strconv.ParseBool(s)
		if b {
			*p = server.StoreAlways
		}
		return b, err
	}
	return &value[bool]{p: new(*p == server.StoreAlways), parse: parse, show: strconv.FormatBool, want: wantBool}
}

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
	return &value[map[string]string]{p: m, parse: parse}
}

// retired is a setting that no longer lands anywhere: a value given is
// accepted, so that a deployment that set it still starts, and noted at
// start with the setting that took its place.
func retired(c *Config, name, now string) flag.Value {
	parse := func(s string) (string, error) {
		note := fmt.Sprintf("-%s (%s) is retired: %s is ignored, %s applies", name, floodgateVar(name), s, now)
		c.Notes = append(c.Notes, note)
		return s, nil
	}
	return &value[string]{p: new(string), parse: parse}
}
