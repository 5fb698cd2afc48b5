package replay

import (
	"fmt"
	"html/template"
	"io"
	"strings"
)

// maxChartPoints bounds the points of the chart: longer traffic is drawn
// in bins of several minutes.
const maxChartPoints = 1440

// chart is the inline SVG of denials per bin, old vs new.
type chart struct {
	Width, Height int
	Old, New      string // polyline points
	Max           int
	BinMinutes    int
	From, To      string
	Empty         bool
}

// newChart bins the report's minutes from its first to its last request.
func newChart(rep *Report) chart {
	c := chart{Width: 800, Height: 200, BinMinutes: 1, From: stamp(rep.From), To: stamp(rep.To)}
	if rep.Requests == 0 {
		c.Empty = true
		return c
	}
	first := floorDiv(rep.From.Unix(), 60)
	last := max(floorDiv(rep.To.Unix(), 60), first)
	span := int(last-first) + 1
	c.BinMinutes = (span + maxChartPoints - 1) / maxChartPoints
	bins := (span + c.BinMinutes - 1) / c.BinMinutes
	oldV, newV := make([]int, bins), make([]int, bins)
	for _, m := range rep.Minutes {
		i := int(floorDiv(m.Minute.Unix(), 60)-first) / c.BinMinutes
		if i < 0 || i >= bins {
			continue // out of order before From cannot happen; be safe
		}
		oldV[i] += m.OldDenied
		newV[i] += m.NewDenied
		c.Max = max(c.Max, oldV[i], newV[i])
	}
	c.Old, c.New = c.points(oldV), c.points(newV)
	return c
}

// points maps values to the chart's area: x left to right, 0 at the
// bottom, Max (at least 1) at the top.
func (c *chart) points(v []int) string {
	var b strings.Builder
	top := max(c.Max, 1)
	for i, n := range v {
		x := 0.0
		if len(v) > 1 {
			x = float64(i) * float64(c.Width) / float64(len(v)-1)
		}
		y := float64(c.Height) - float64(n)*float64(c.Height)/float64(top)
		fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
	}
	return strings.TrimSpace(b.String())
}

var htmlReport = template.Must(template.New("report").Funcs(template.FuncMap{
	"stamp": stamp, "delta": delta, "orNone": orNone, "why": exampleWhy,
	"field": ruleField, "change": func(r RuleDiff) string { return delta(denials(r.New) - denials(r.Old)) },
	"shadow": func(r RuleDiff) bool { return r.Old != nil && r.Old.Shadow || r.New != nil && r.New.Shadow },
	"sub":    func(a, b int) int { return a - b },
	"plural": plural,
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>floodgate replay</title>
<style>
body{font:14px system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right;white-space:nowrap}
th{text-align:left}
th:first-child,td:first-child,td.l{text-align:left}
.old{stroke:#888}.new{stroke:#c22}
svg{border:1px solid #ccc;background:#fafafa}
code{font-size:13px}
</style></head><body>
<h1>floodgate replay</h1>
<p>{{.Summary}}.<br>
old: <code>{{.Old.Name}}</code> &nbsp; new: <code>{{.New.Name}}</code></p>

<h2>Denials per {{if eq .Chart.BinMinutes 1}}minute{{else}}{{.Chart.BinMinutes}} minutes{{end}}</h2>
{{if .Chart.Empty}}<p>No traffic.</p>{{else}}
<svg id="chart" role="img" aria-label="denials old vs new" width="{{.Chart.Width}}" height="{{.Chart.Height}}" viewBox="0 0 {{.Chart.Width}} {{.Chart.Height}}">
<polyline class="old" fill="none" stroke-width="1.5" points="{{.Chart.Old}}"/>
<polyline class="new" fill="none" stroke-width="1.5" points="{{.Chart.New}}"/>
<text x="4" y="14" font-size="12">{{.Chart.Max}}</text>
</svg>
<p><span style="color:#888">&#9644; old</span> &nbsp; <span style="color:#c22">&#9644; new</span> &nbsp; from {{.Chart.From}} to {{.Chart.To}}, 0 to {{.Chart.Max}} denials</p>{{end}}

<h2>Per domain</h2>
<table><tr><th>domain</th><th>old allowed</th><th>old denied</th><th>new allowed</th><th>new denied</th><th>change</th></tr>
{{range .Domains}}<tr><td>{{.Domain}}</td><td>{{.Old.Allowed}}</td><td>{{.Old.Denied}}</td><td>{{.New.Allowed}}</td><td>{{.New.Denied}}</td><td>{{delta (sub .New.Denied .Old.Denied)}}</td></tr>
{{end}}<tr><th>(all)</th><th>{{.Old.Allowed}}</th><th>{{.Old.Denied}}</th><th>{{.New.Allowed}}</th><th>{{.New.Denied}}</th><th>{{delta (sub .New.Denied .Old.Denied)}}</th></tr></table>

<h2>Per rule</h2>
<p>Descriptors that matched the rule, within or over its limits{{if .Idle}}; {{plural .Idle "rule"}} without traffic not shown{{end}}.</p>
<table><tr><th>rule</th><th>old allowed</th><th>old denied</th><th>new allowed</th><th>new denied</th><th>change</th></tr>
{{range .Active}}<tr><td>{{.Rule}}{{if shadow .}} (shadow){{end}}</td><td>{{field .Old false}}</td><td>{{field .Old true}}</td><td>{{field .New false}}</td><td>{{field .New true}}</td><td>{{change .}}</td></tr>
{{end}}</table>

<h2>Decisions changed: {{.Changed.Total}}</h2>
<p>{{.Changed.NowDenied}} now denied, {{.Changed.NowAllowed}} now allowed{{if .Changed.Other}}, {{.Changed.Other}} to or from invalid{{end}}.</p>
{{if .Changed.Examples}}<table><tr><th>time</th><th>domain</th><th>descriptors</th><th>old</th><th>new</th><th>why</th></tr>
{{range .Changed.Examples}}<tr><td>{{stamp .Time}}</td><td class="l">{{.Domain}}</td><td class="l"><code>{{.Descriptors}}</code></td><td>{{.Old}}</td><td>{{.New}}</td><td class="l">{{why .}}</td></tr>
{{end}}</table>{{end}}

<h2>Busiest counters</h2>
<p>{{plural .Counters "counter"}} seen; requests offered, whatever was decided.</p>
<table><tr><th>domain</th><th>descriptor</th><th>requests</th><th>peak/s</th><th>at</th><th>peak/min</th><th>old rule</th><th>new rule</th></tr>
{{range .Peaks}}<tr><td>{{.Domain}}</td><td class="l"><code>{{.Descriptor}}</code></td><td>{{.Requests}}</td><td>{{.PeakPerSecond}}</td><td>{{stamp .PeakSecond}}</td><td>{{.PeakPerMinute}}</td><td class="l">{{orNone .OldRule}}</td><td class="l">{{orNone .NewRule}}</td></tr>
{{end}}</table>
</body></html>
`))

// WriteHTML writes the report as one HTML page with no external assets:
// the tables of WriteText and a chart (inline SVG) of the denials per
// minute under each set.
func (rep *Report) WriteHTML(w io.Writer) error {
	active, idle := rep.activeRules()
	return htmlReport.Execute(w, struct {
		*Report
		Chart   chart
		Active  []RuleDiff
		Idle    int
		Summary string
	}{rep, newChart(rep), active, idle, rep.summary()})
}
