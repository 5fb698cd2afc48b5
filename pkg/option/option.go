// Package option is the error a package returns for options it refuses:
// an *Error naming the field by its path in the options struct, so that a
// program which sets the fields from flags or variables of its own can
// name those instead (Error.Message) without reading the message. It
// imports nothing of floodgate's.
package option

import (
	"fmt"
	"strings"
)

// Error is options a package refuses: a field of an options struct, the
// value it was given and what was wanted of it. Its message names each
// field by its path, after the options type:
//
//	envoy.Options.NearLimitRatio 2: want a number between 0 and 1
//	store.Options.Redis.TLS needs store.Options.Redis.URL (REDIS_URL)
type Error struct {
	// Options is the options type, after its package's name:
	// "envoy.Options".
	Options string
	// Field is the path of the refused field in Options:
	// "NearLimitRatio", "Redis.PoolSize".
	Field string
	// Also are other fields refused with Field, for the same reason
	// ("A, B and C need D").
	Also []string
	// Value is the value Field was given, shown after it and followed by a
	// colon; nil shows none, for a field refused for being set at all.
	Value any
	// Want is what was wanted: "want a number between 0 and 1", "must not
	// be negative", or "needs %s", with a %s for each of With.
	Want string
	// With are the other fields of Options that Want names, by path.
	With []string
	// Err is what refused the value when another function did (an
	// address parser), or nil; its message ends the Error's.
	Err error
}

// Error returns the message, each field named after Options:
// "envoy.Options.NearLimitRatio 2: want a number between 0 and 1".
func (e *Error) Error() string {
	return e.Message(func(field string) string { return e.Options + "." + field })
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Message returns the message with each field, Field, Also and With, named
// by name(path): a program that set the field from its flag -ratio can say
// "-ratio 2: want a number between 0 and 1".
func (e *Error) Message(name func(field string) string) string {
	subject := make([]string, 0, 1+len(e.Also))
	for _, f := range append([]string{e.Field}, e.Also...) {
		subject = append(subject, name(f))
	}
	want := e.Want
	if len(e.With) > 0 {
		with := make([]any, len(e.With))
		for i, f := range e.With {
			with[i] = name(f)
		}
		want = fmt.Sprintf(want, with...)
	}
	if e.Err != nil {
		want = strings.TrimPrefix(want+": "+e.Err.Error(), ": ")
	}
	if e.Value == nil {
		return list(subject) + " " + want
	}
	return list(subject) + " " + show(e.Value) + ": " + want
}

// show formats a value as a message quotes it: a string in quotes, so
// that an empty one or one with blanks reads as such.
func show(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprint(v)
}

// list joins names as "a, b and c".
func list(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
