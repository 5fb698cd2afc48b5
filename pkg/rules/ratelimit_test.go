package rules

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floodgate/floodgate/pkg/limit"
)

// TestRateLimitTableIsDocumented: docs/rules.md lists each rate_limit field
// of rateLimitTable with the table's type and default, and no other.
func TestRateLimitTableIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/rules.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "### Rate limit fields\n")
	if !ok {
		t.Fatal(`docs/rules.md has no "### Rate limit fields" section`)
	}
	_, section, _ = strings.Cut(section, "|---|---|---|---|\n") // the rows follow the header's rule
	rows := map[string][2]string{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			break
		}
		cells := strings.Split(line, " | ")
		rows[strings.Trim(cells[0], "| `")] = [2]string{cells[1], cells[2]}
	}
	for _, f := range rateLimitTable {
		row, ok := rows[f.name]
		switch {
		case !ok:
			t.Errorf("docs/rules.md lacks the rate_limit field %s", f.name)
		case row != [2]string{f.typ, f.def}:
			t.Errorf("docs/rules.md: %s is %q, default %q; the table says %q, default %q", f.name, row[0], row[1], f.typ, f.def)
		}
		delete(rows, f.name)
	}
	for name := range rows {
		t.Errorf("docs/rules.md lists %s, which rateLimitTable does not declare", name)
	}
}

// TestUnlimitedRefusesTheTablesFields: every field the table refuses with
// unlimited: true is refused at its name, whatever its value's kind.
func TestUnlimitedRefusesTheTablesFields(t *testing.T) {
	samples := map[kind]string{kindText: "UTC", kindBool: "true", kindWhole: "2", kindReplaces: "[{name: x}]"}
	refused := 0
	for _, f := range rateLimitTable {
		if f.unlimitedWhy != neverCounted {
			continue
		}
		refused++
		t.Run(f.name, func(t *testing.T) {
			errs := loadErrors(t, map[string]string{"u.yaml": limitFile("unlimited: true", f.name+": "+samples[f.kind])}, Options{})
			w := wantErr{"6:7", "descriptors[0].rate_limit." + f.name, "given with unlimited: true (an unlimited limit is never counted; remove one of them)"}
			if !hasError(errs, "u.yaml", w) {
				t.Errorf("want %+v, got\n%v", w, (&LoadError{errs}).Error())
			}
		})
	}
	if refused != 6 { // algorithm, burst, precision, unit_multiplier, calendar, timezone; unit is refused by its value
		t.Errorf("%d fields refused with unlimited, want 6", refused)
	}
}

// TestEveryProblemOfALimit: the problems of one limit's spec are all
// reported, each at the field that set it.
func TestEveryProblemOfALimit(t *testing.T) {
	errs := loadErrors(t, map[string]string{"p.yaml": limitFile("unit: second", "burst: 5", "precision: 4", "timezone: UTC")}, Options{})
	want := []wantErr{
		{"6:14", "descriptors[0].rate_limit.burst", "fixed_window has no burst"},
		{"7:18", "descriptors[0].rate_limit.precision", "fixed_window has no precision"},
		{"8:7", "descriptors[0].rate_limit.timezone", "given without calendar: true"},
	}
	for _, w := range want {
		if !hasError(errs, "p.yaml", w) {
			t.Errorf("want %+v", w)
		}
	}
	if len(errs) != len(want) {
		t.Errorf("%d errors, want %d:\n%v", len(errs), len(want), (&LoadError{errs}).Error())
	}
}

func TestUnitWindow(t *testing.T) {
	tests := []struct {
		unit    Unit
		mult    uint32
		want    time.Duration
		wantErr string
	}{
		{second, 30, 30 * time.Second, ""},
		{year, 292, 292 * 365 * 24 * time.Hour, ""},
		{year, 293, 0, "293 years is too long a window (want at most 292)"},
		{minute, 0, 0, "0 minutes is no window (want at least 1)"},
		{0, 1, 0, "no unit"},
	}
	for _, tt := range tests {
		got, err := tt.unit.Window(tt.mult)
		if got != tt.want || (err == nil) != (tt.wantErr == "") || err != nil && err.Error() != tt.wantErr {
			t.Errorf("%v.Window(%d) = %v, %v; want %v, %q", tt.unit, tt.mult, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestReportSpecOfAnyShape: whatever shape Spec.Validate's error takes, a
// rule file gets each problem, at its field when a SpecError names one,
// else at the rate_limit; none is dropped and none panics.
func TestReportSpecOfAnyShape(t *testing.T) {
	node := &yaml.Node{Line: 3, Column: 5}
	for _, tc := range []struct {
		name string
		err  error
		want []string
	}{
		{"SpecErrors", errors.Join(&limit.SpecError{Param: "limit", Msg: "negative limit -1"}, &limit.SpecError{Msg: "other"}),
			[]string{"f.yaml:3:5: rl: negative limit -1", "f.yaml:3:5: rl: other"}},
		{"a plain error", errors.New("plain"), []string{"f.yaml:3:5: rl: plain"}},
		{"a joined plain error", errors.Join(errors.New("joined")), []string{"f.yaml:3:5: rl: joined"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &parser{problems: &problems{}, file: "f.yaml"}
			var d draft
			d.reset(node, "rl", p.pos(node))
			p.reportSpec(&d, tc.err)
			var got []string
			for _, e := range p.errs {
				got = append(got, e.Error())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
