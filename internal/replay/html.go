package replay

import (
	"fmt"
	"html/template"
	"io"
	"time"
)

// maxChartBins bounds the bars of the chart, so that each stays a few
// pixels wide: longer traffic is drawn in bins of several minutes.
const maxChartBins = 120

// chart is the inline SVG of denials per bin, old and new side by side:
// bars, since a bin is a count, not a sample of something continuous (a
// line between two bins would read as a gradual change).
type chart struct {
	Width, Height int
	Bars          []bar
	Ticks         []tick // under the bars, at most maxTicks
	Max           int
	BinMinutes    int
	From, To      string
	Empty         bool
}

// maxTicks bounds the time labels under the chart.
const maxTicks = 8

// tick is a time label under the chart, centred on its bin.
type tick struct {
	X    float64
	Text string
}

// bar is one rectangle of the chart, with its tooltip.
type bar struct {
	Class      string // old or new
	X, Y, W, H float64
	Title      string
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
	c.BinMinutes = (span + maxChartBins - 1) / maxChartBins
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
	// Each bin is a slot of the width: old on the left, new on the right,
	// centred, with at least a fifth of the slot between bins, and no
	// wider than maxBarWidth each, so that a short replay does not draw
	// two bars as wide as the chart.
	const maxBarWidth = 24
	slot := float64(c.Width) / float64(bins)
	w := min(slot*0.4, maxBarWidth)
	pad := (slot - 2*w) / 2
	top := float64(max(c.Max, 1))
	every := (bins + maxTicks - 1) / maxTicks
	for i := range bins {
		start := time.Unix((first+int64(i*c.BinMinutes))*60, 0).UTC()
		at := start.Format("2006-01-02 15:04")
		if i%every == 0 {
			c.Ticks = append(c.Ticks, tick{X: (float64(i) + 0.5) * slot, Text: start.Format("15:04")})
		}
		for j, v := range []struct {
			class string
			n     int
		}{{"old", oldV[i]}, {"new", newV[i]}} {
			if v.n == 0 {
				continue
			}
			h := float64(v.n) * float64(c.Height) / top
			c.Bars = append(c.Bars, bar{Class: v.class, X: float64(i)*slot + pad + float64(j)*w, Y: float64(c.Height) - h, W: w, H: h,
				Title: fmt.Sprintf("%s UTC: %s, %d denied", at, v.class, v.n)})
		}
	}
	return c
}

var htmlReport = template.Must(template.New("report").Funcs(template.FuncMap{
	"stamp": stamp, "delta": delta, "orNone": orNone, "why": exampleWhy,
	"ruleName": ruleName,
	"requests": func(r RuleDiff) string { return r.cell(requestsCell) },
	"denied":   func(r RuleDiff) string { return r.cell(deniedCell) },
	"refused":  func(r RuleDiff) string { return r.cell((*RuleCount).refusedCell) },
	"oldShare": ValueChange.oldShare, "newShare": ValueChange.newShare, "signed": signed,
	"sub":    func(a, b int) int { return a - b },
	"plural": plural,
	"add":    func(a, b int) int { return a + b },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>floodgate replay</title>
<style>
body{font:14px system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right;white-space:nowrap}
td.l{white-space:normal;overflow-wrap:anywhere;text-align:left}
td.l code{overflow-wrap:anywhere}
table{max-width:100%}
th{text-align:left}
th:first-child,td:first-child,td.l{text-align:left}
rect.old{fill:#888}rect.new{fill:#c22}
svg{overflow:visible}
code{font-size:13px}
</style></head><body>
<h1>floodgate replay</h1>
<p>{{.Summary}}.<br>
{{if .Inputs}}traffic: {{.Inputs}}<br>
{{end}}old: <code>{{.Old.Name}}</code> &nbsp; new: <code>{{.New.Name}}</code></p>

<h2>Denials per {{if eq .Chart.BinMinutes 1}}minute{{else}}{{.Chart.BinMinutes}} minutes{{end}}</h2>
{{if .Chart.Empty}}<p>No traffic.</p>{{else}}
<svg id="chart" role="img" aria-label="denials old vs new" width="{{.Chart.Width}}" height="{{add .Chart.Height 18}}" viewBox="0 0 {{.Chart.Width}} {{add .Chart.Height 18}}">
<rect x="0" y="0" width="{{.Chart.Width}}" height="{{.Chart.Height}}" fill="#fafafa" stroke="#ccc"/>
{{range .Chart.Bars}}<rect class="{{.Class}}" x="{{printf "%.1f" .X}}" y="{{printf "%.1f" .Y}}" width="{{printf "%.1f" .W}}" height="{{printf "%.1f" .H}}"><title>{{.Title}}</title></rect>
{{end}}{{range .Chart.Ticks}}<text x="{{printf "%.1f" .X}}" y="{{$.Chart.Height}}" dy="14" font-size="11" text-anchor="middle">{{.Text}}</text>
{{end}}<text x="4" y="14" font-size="12">{{.Chart.Max}}</text>
</svg>
<p><span style="color:#888">&#9632; old</span> (left) &nbsp; <span style="color:#c22">&#9632; new</span> (right of each pair) &nbsp; from {{.Chart.From}} to {{.Chart.To}}, 0 to {{.Chart.Max}} denials</p>{{end}}

<h2>Per domain</h2>
<table><tr><th>domain</th><th>old allowed</th><th>old denied</th><th>new allowed</th><th>new denied</th><th>change</th></tr>
{{range .Domains}}<tr><td>{{.Domain}}</td><td>{{.Old.Allowed}}</td><td>{{.Old.Denied}}</td><td>{{.New.Allowed}}</td><td>{{.New.Denied}}</td><td>{{delta (sub .New.Denied .Old.Denied)}}</td></tr>
{{end}}<tr><th>(all)</th><th>{{.Old.Allowed}}</th><th>{{.Old.Denied}}</th><th>{{.New.Allowed}}</th><th>{{.New.Denied}}</th><th>{{delta (sub .New.Denied .Old.Denied)}}</th></tr></table>

<h2>Per rule</h2>
<p>The requests with a descriptor that matched the rule, old -&gt; new where they differ.
{{.RulesLegend}}{{if .Idle}} {{plural .Idle "rule"}} without traffic not shown.{{end}}</p>
<table id="rules"><tr><th>rule</th><th>requests</th><th>denied</th><th>refused</th><th>now denied</th><th>now allowed</th></tr>
{{range .Active}}<tr><td class="l">{{ruleName .}}</td><td>{{requests .}}</td><td>{{denied .}}</td><td>{{refused .}}</td><td>{{.NowDenied}}</td><td>{{.NowAllowed}}</td></tr>
{{end}}</table>

<h2>Decisions changed: {{.Changed.Total}}</h2>
<p>{{.Changed.NowDenied}} now denied, {{.Changed.NowAllowed}} now allowed{{if .Changed.Other}}, {{.Changed.Other}} to or from invalid{{end}}.</p>
{{if .Changed.Examples}}<table><tr><th>time</th><th>domain</th><th>descriptors</th><th>old</th><th>new</th><th>why</th></tr>
{{range .Changed.Examples}}<tr><td>{{stamp .Time}}</td><td class="l">{{.Domain}}</td><td class="l"><code>{{.Descriptors}}</code></td><td>{{.Old}}</td><td>{{.New}}</td><td class="l">{{why .}}</td></tr>
{{end}}</table>{{end}}

<h2>Descriptor values by change in denials</h2>
{{if .Values}}<p>Listing {{.ValuesShown}} with a request denied under either rule set.
{{.ValuesLegend}}</p>
<table id="values"><tr><th>domain</th><th>descriptor</th><th>requests</th><th>old denied</th><th>new denied</th><th>change</th></tr>
{{range .Values}}<tr><td>{{.Domain}}</td><td class="l"><code>{{.Descriptor}}</code></td><td>{{.Requests}}</td><td>{{oldShare .}}</td><td>{{newShare .}}</td><td>{{signed .Change}}</td></tr>
{{end}}</table>{{else}}<p>No descriptor value has a request denied under either rule set.</p>{{end}}

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
	inputs := ""
	if len(rep.Traffic) > 1 {
		inputs = rep.inputs()
	}
	return htmlReport.Execute(w, struct {
		*Report
		Chart                     chart
		Active                    []RuleDiff
		Idle                      int
		Summary, Inputs           string
		RulesLegend, ValuesLegend string
		ValuesShown               string
	}{rep, newChart(rep), active, idle, rep.summary(), inputs, rulesLegend, valuesLegend, rep.valuesShown()})
}
