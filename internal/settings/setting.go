package settings

import (
	"flag"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
)

// sections are the sections of -h and docs/settings.md, in order. Adding
// a setting is a row in its section (table_*.go) and the field it lands in.
var sections = [][]Setting{rulesRows, xdsRows,
	redisRows, perSecondRows, redisTLSRows, memcacheRows,
	listenerRows, grpcTLSRows, boundsRows, answerRows, rlqsRows,
	observeRows, tracingRows, captureRows, commandRows}

// Table declares every setting of the binary, section by section.
var Table = slices.Concat(sections...)

// section sets the section of -h, group, on each of rows.
func section(group string, rows []Setting) []Setting {
	for i := range rows {
		rows[i].Group = group
	}
	return rows
}

// Setting declares one setting of the binary: its flag, its help, its
// default and where its value lands. Its FLOODGATE_* variable derives
// from the flag; the reference's variables that set it are References
// naming the flag. The flags, the environment, -h and the docs' tables
// all read Table.
type Setting struct {
	// Flag is the flag's name without the dash: "near-limit-ratio".
	Flag string
	// Group is the section of -h it is listed in; section sets it.
	Group string
	// Usage is the help line of -h.
	Usage string
	// Doc, when set, replaces Usage in docs/settings.md (Markdown).
	Doc string
	// DefaultDoc, when set, is the default as docs/settings.md shows it
	// ("10 per CPU" where the flag's default is 0).
	DefaultDoc string
	// At returns a pointer to the field of c the value lands in: a field
	// of the Options of the package the setting configures. Nil for a
	// retired setting, whose Value only notes it.
	At func(c *Config) any
	// Default is the value before any flag or variable, of the field's
	// type: the owning package's exported constant. Nil is the field's
	// zero value.
	Default any
	// Value, when set, parses the flag instead of the field's type: for
	// a field that takes several settings (-health-requires-store and
	// -store-readiness) or a form the type does not read (k=v pairs).
	Value func(c *Config, env Lookup) flag.Value
	// Type names the value in -h ("duration", "mode"); empty derives it
	// from the field's type.
	Type string
	// Secret marks a credential: its value is never shown.
	Secret bool
	// URL marks a value that may hold credentials in URLs
	// (user:password@host): their passwords are never shown.
	URL bool
	// Command marks the flags that choose what the binary does (-check):
	// no variable sets them.
	Command bool
}

// floodgateVar returns a setting's own variable: FLOODGATE_ and its flag in
// upper case, '-' as '_' (FLOODGATE_REDIS_DEADLINE for -redis-deadline).
func floodgateVar(flag string) string {
	return "FLOODGATE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Lookup reads an environment variable, as os.LookupEnv does.
type Lookup func(name string) (string, bool)

// flagSet registers every setting of Table on a flag set writing into c,
// each field set to its default first. It prints nothing: the binary
// prints the usage and errors in the log format asked for. A row it
// cannot register is a mistake in Table: it panics, naming the flag, and
// every test that loads the settings fails.
func flagSet(c *Config, env Lookup) *flag.FlagSet {
	fs := flag.NewFlagSet("floodgate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	for i := range Table {
		s := &Table[i]
		v, err := s.value(c, env)
		if err != nil {
			panic(fmt.Sprintf("settings: -%s: %v", s.Flag, err))
		}
		fs.Var(v, s.Flag, s.Usage)
	}
	return fs
}

// value returns the flag.Value of s over c, its field set to the default.
func (s *Setting) value(c *Config, env Lookup) (flag.Value, error) {
	if s.At == nil && s.Value != nil {
		return s.Value(c, env), nil // a retired setting lands nowhere
	}
	p := reflect.ValueOf(s.At(c))
	if p.Kind() != reflect.Pointer {
		return nil, fmt.Errorf("At returns %s, want a pointer", p.Type())
	}
	if s.Default != nil {
		d, err := convertDefault(reflect.ValueOf(s.Default), p.Elem().Type())
		if err != nil {
			return nil, err
		}
		p.Elem().Set(d)
	}
	if s.Value != nil {
		return s.Value(c, env), nil
	}
	if v := fieldValue(p.Interface()); v != nil {
		return v, nil
	}
	return nil, fmt.Errorf("no flag for a field of type %s", p.Elem().Type())
}

// option returns the package, the Options type and the path within it
// of the field s lands in: ("envoy", "Options", "NearLimitRatio") for
// Service.NearLimitRatio; empty for a field of Config itself. A package's
// options are the outermost type of its whose name ends in "Options".
func (s *Setting) option() (pkg, typ, field string) {
	if s.At == nil {
		return "", "", ""
	}
	var c Config
	path := fieldPath(reflect.ValueOf(&c).Elem(), reflect.ValueOf(s.At(&c)).Pointer())
	for i, f := range path {
		t := f.Type
		if strings.HasSuffix(t.Name(), "Options") && t.PkgPath() != "" && !strings.HasSuffix(t.PkgPath(), "/settings") {
			var names []string
			for _, f := range path[i+1:] {
				names = append(names, f.Name)
			}
			return t.PkgPath()[strings.LastIndex(t.PkgPath(), "/")+1:], t.Name(), strings.Join(names, ".")
		}
	}
	return "", "", ""
}

// fieldPath returns the exported fields from the struct v down to the
// field at address addr, or nil.
func fieldPath(v reflect.Value, addr uintptr) []reflect.StructField {
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		if !sf.IsExported() {
			continue
		}
		if f.Kind() == reflect.Struct {
			if p := fieldPath(f, addr); p != nil {
				return append([]reflect.StructField{sf}, p...)
			}
		}
		if f.Addr().Pointer() == addr {
			return []reflect.StructField{sf}
		}
	}
	return nil
}

// convertDefault converts d to t: as it is when assignable, or, for an
// untyped constant Go made an int or a float64, to t of the same kind.
func convertDefault(d reflect.Value, t reflect.Type) (reflect.Value, error) {
	if d.Type().AssignableTo(t) {
		return d, nil
	}
	sameKind := d.CanInt() && reflect.Zero(t).CanInt() || d.CanFloat() && reflect.Zero(t).CanFloat()
	if d.Type().Name() == d.Kind().String() && sameKind {
		return d.Convert(t), nil
	}
	return reflect.Value{}, fmt.Errorf("default %v is a %s, the field a %s", d, d.Type(), t)
}
