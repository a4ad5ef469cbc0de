package turnstile

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/metrics"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// The dashboard and the alert rules users import: every query in them
// must name metrics, and labels, that a running Caddy exports.
const (
	grafanaDashboardFile = "examples/grafana/gpu-turnstile.json"
	grafanaAlertsFile    = "examples/grafana/alerts.yml"
)

// promQuery is one PromQL expression, where it was found, and the labels
// used beside it (a legend's {{label}}, label_values' label).
type promQuery struct {
	where, expr string
	labels      []string
}

type grafanaPanel struct {
	ID          int                   `json:"id"`
	Title       string                `json:"title"`
	Type        string                `json:"type"`
	Datasource  *struct{ UID string } `json:"datasource"`
	FieldConfig struct {
		Defaults struct {
			Mappings []struct {
				Type    string
				Options map[string]struct{ Text string }
			}
		}
	} `json:"fieldConfig"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // a collapsed row's panels
}

type grafanaDashboard struct {
	SchemaVersion int            `json:"schemaVersion"`
	Panels        []grafanaPanel `json:"panels"`
	Templating    struct {
		List []struct {
			Name, Type string
			Query      json.RawMessage
		}
	} `json:"templating"`
}

func readDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	b, err := os.ReadFile(grafanaDashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", grafanaDashboardFile, err)
	}
	return d
}

// panelsOf flattens the dashboard's panels, rows' own included.
func panelsOf(ps []grafanaPanel) []grafanaPanel {
	var out []grafanaPanel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, panelsOf(p.Panels)...)
	}
	return out
}

var legendLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// dashboardQueries lists every panel's expressions and every template
// variable's query (label_values(METRIC, LABEL) checks LABEL on METRIC).
func dashboardQueries(t *testing.T, d grafanaDashboard) []promQuery {
	t.Helper()
	var qs []promQuery
	for _, p := range panelsOf(d.Panels) {
		for i, tg := range p.Targets {
			q := promQuery{where: fmt.Sprintf("panel %q target %d", p.Title, i), expr: tg.Expr}
			for _, m := range legendLabel.FindAllStringSubmatch(tg.LegendFormat, -1) {
				q.labels = append(q.labels, m[1])
			}
			qs = append(qs, q)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q.Query); err != nil { // a plain string, or {"query": ...}
			if err := json.Unmarshal(v.Query, &q); err != nil {
				t.Fatalf("variable %s: query %s: %v", v.Name, v.Query, err)
			}
		}
		qs = append(qs, templateQuery("variable "+v.Name, q.Query))
	}
	return qs
}

var labelValues = regexp.MustCompile(`^\s*label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

func templateQuery(where, query string) promQuery {
	if m := labelValues.FindStringSubmatch(query); m != nil {
		return promQuery{where: where, expr: m[1], labels: []string{m[2]}}
	}
	return promQuery{where: where, expr: query}
}

// alertQueries reads the rules' expressions, one a line.
func alertQueries(t *testing.T) []promQuery {
	t.Helper()
	b, err := os.ReadFile(grafanaAlertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var qs []promQuery
	for i, line := range strings.Split(string(b), "\n") {
		if expr, ok := strings.CutPrefix(strings.TrimSpace(line), "expr:"); ok {
			qs = append(qs, promQuery{where: fmt.Sprintf("%s:%d", grafanaAlertsFile, i+1), expr: strings.TrimSpace(expr)})
		}
	}
	return qs
}

// promToken is a PromQL token: an identifier, a string, or one character
// of punctuation. Numbers and durations (offset 1h), a range or subquery
// ([5m], [$__rate_interval]) and Grafana's variables ($turnstile, ${x})
// are skipped whole: they name no metric or label.
type promToken struct {
	text  string
	ident bool
}

func promTokens(expr string) ([]promToken, error) {
	var toks []promToken
	isIdent := func(c byte, first bool) bool {
		return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
	}
	for i := 0; i < len(expr); {
		c, start := expr[i], i
		switch {
		case c == '"' || c == '\'' || c == '`':
			for i++; i < len(expr) && expr[i] != c; i++ {
				if expr[i] == '\\' && c != '`' {
					i++
				}
			}
			if i >= len(expr) {
				return nil, fmt.Errorf("unterminated string at %d", start)
			}
			i++
			toks = append(toks, promToken{text: expr[start:i]})
		case c == '[':
			end := strings.IndexByte(expr[i:], ']')
			if end < 0 {
				return nil, fmt.Errorf("unterminated [ at %d", start)
			}
			i += end + 1
		case c == '$':
			for i++; i < len(expr) && (isIdent(expr[i], false) || expr[i] == '{' || expr[i] == '}'); i++ {
			}
		case isIdent(c, true):
			for i++; i < len(expr) && isIdent(expr[i], false); i++ {
			}
			toks = append(toks, promToken{text: expr[start:i], ident: true})
		case c >= '0' && c <= '9' || c == '.':
			for i++; i < len(expr) && (isIdent(expr[i], false) || expr[i] == '.'); i++ {
			}
		default:
			i++
			if c != ' ' && c != '\t' && c != '\n' {
				toks = append(toks, promToken{text: string(c)})
			}
		}
	}
	return toks, nil
}

// promKeywords are identifiers that never name a metric.
var promKeywords = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true, "by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true, "bool": true, "offset": true, "and": true, "or": true,
	"unless": true, "atan2": true, "Inf": true, "NaN": true, "inf": true, "nan": true,
}

// grouping keywords take a list of label names.
var promGrouping = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// promSelector is a metric an expression selects and the labels its
// matchers name.
type promSelector struct {
	metric string
	labels []string
}

// parsePromQL finds the metrics an expression selects, the labels each
// selector matches on, and the labels the expression groups or matches
// by. Functions are identifiers followed by "(".
func parsePromQL(expr string) (sels []promSelector, grouping []string, err error) {
	toks, err := promTokens(expr)
	if err != nil {
		return nil, nil, err
	}
	next := func(i int) string {
		if i+1 < len(toks) {
			return toks[i+1].text
		}
		return ""
	}
	for i := 0; i < len(toks); i++ {
		tk := toks[i]
		switch {
		case tk.ident && promGrouping[tk.text] && next(i) == "(":
			for i += 2; i < len(toks) && toks[i].text != ")"; i++ {
				if toks[i].ident {
					grouping = append(grouping, toks[i].text)
				}
			}
		case tk.ident && !promKeywords[tk.text] && next(i) != "(":
			sel := promSelector{metric: tk.text}
			if next(i) == "{" {
				for i += 2; i < len(toks) && toks[i].text != "}"; i++ {
					if toks[i].ident {
						sel.labels = append(sel.labels, toks[i].text)
					}
				}
			}
			sels = append(sels, sel)
		case tk.text == "{":
			return nil, nil, fmt.Errorf("a selector without a metric name: %s", expr)
		}
	}
	return sels, grouping, nil
}

// promFamilies are the metric families of a scrape, by name.
type promFamilies map[string]*dto.MetricFamily

// targetLabels are added by Prometheus to every series it scrapes.
var targetLabels = []string{"instance", "job"}

// labelsOf returns the label names a series name has in the scrape: a
// family's own name, or a histogram's _bucket (with le), _sum or _count.
func (f promFamilies) labelsOf(name string) ([]string, bool) {
	labels := func(mf *dto.MetricFamily) []string {
		out := slices.Clone(targetLabels)
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				out = append(out, lp.GetName())
			}
		}
		return out
	}
	if mf, ok := f[name]; ok && mf.GetType() != dto.MetricType_HISTOGRAM && mf.GetType() != dto.MetricType_SUMMARY {
		return labels(mf), true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if mf := f[base]; ok && mf != nil && mf.GetType() == dto.MetricType_HISTOGRAM {
			if suffix == "_bucket" {
				return append(labels(mf), "le"), true
			}
			return labels(mf), true
		}
	}
	return nil, false
}

// check lists what is wrong with a query against the scrape: a series
// that is not there, a label that none of it has.
func (f promFamilies) check(q promQuery) []string {
	sels, grouping, err := parsePromQL(q.expr)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", q.where, err)}
	}
	if len(sels) == 0 {
		return []string{fmt.Sprintf("%s: selects no metric: %s", q.where, q.expr)}
	}
	var problems []string
	for _, s := range sels {
		have, ok := f.labelsOf(s.metric)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: no metric %s in Caddy's /metrics: %s", q.where, s.metric, q.expr))
			continue
		}
		for _, l := range slices.Concat(s.labels, grouping, q.labels) {
			if !slices.Contains(have, l) {
				problems = append(problems, fmt.Sprintf("%s: %s has no label %q: %s", q.where, s.metric, l, q.expr))
			}
		}
	}
	return problems
}

// scrapeEverySeries runs Caddy with a turnstile whose card is read (for
// the VRAM gauge), takes it through an image job, a chat and a hold, has
// every other labelled series counted once through gpu.Metrics, and
// parses the admin endpoint's /metrics.
func scrapeEverySeries(t *testing.T) promFamilies {
	t.Helper()
	h := vramHarness(t, "")
	h.waitStatus("a first reading of the card", func(st Status) bool { return st.VRAM != nil && st.VRAM.ReadAt != nil })
	ctx := context.Background()
	promptID(t, h.post(ctx, h.image+"/prompt", promptBody(20)))
	h.waitIdle()
	if r := h.post(ctx, h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	h.releaseHold(t, h.takeHold(t, "grafana", "1m"))
	h.waitIdle()

	// What these fakes never do (a vLLM wake, a warm-up, a failed call, an
	// overdue interrupt, co-residency), counted under a name of its own.
	var m gpu.Metrics = metrics.New("grafana-test")
	m.Step("wake", "vllm", time.Second)
	m.Step("warm", "ollama", time.Second)
	m.UpstreamError("ollama", "ollama", "unload")
	m.InterruptOverdue("comfyui")
	m.CoResident()

	resp, err := h.client.Get(h.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// Every metric and label the dashboard and the alert rules query is in a
// running Caddy's /metrics, and the checker refuses the mistakes it is
// there to catch.
func TestGrafanaQueriesExistInCaddysMetrics(t *testing.T) {
	d := readDashboard(t)
	queries := append(dashboardQueries(t, d), alertQueries(t)...)
	fams := scrapeEverySeries(t)
	seen := map[string]bool{}
	for _, q := range queries {
		for _, p := range fams.check(q) {
			t.Error(p)
		}
		sels, _, _ := parsePromQL(q.expr)
		for _, s := range sels {
			seen[s.metric] = true
		}
	}
	if len(queries) < 20 || len(seen) < 15 {
		t.Fatalf("read %d queries over %d series: the files were not read as expected", len(queries), len(seen))
	}

	for _, bad := range []promQuery{
		{expr: `rate(gpu_turnstile_made_up_total{turnstile=~"$turnstile"}[5m])`},
		{expr: `gpu_turnstile_lock_wait_seconds{kind="llm"}`}, // a histogram has no bare series
		{expr: `gpu_turnstile_busy_total{flavour="x"}`},
		{expr: `sum by (engine) (gpu_turnstile_busy_total)`},
		{expr: `histogram_quantile(0.9, sum by (le) (rate(gpu_turnstile_unload_seconds_count[5m])))`},
		{expr: `gpu_turnstile_state`, labels: []string{"engine"}},
		{expr: `{__name__="gpu_turnstile_state"}`},
		{expr: `sum(rate(x{a="unterminated}[5m]))`},
	} {
		if len(fams.check(bad)) == 0 {
			t.Errorf("no problem found in %s (labels %v)", bad.expr, bad.labels)
		}
	}
}

// The state panels name each value of gpu_turnstile_state as the lock
// does, and every panel queries the dashboard's data source variable.
func TestGrafanaDashboardMatchesTheCode(t *testing.T) {
	d := readDashboard(t)
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: Grafana 10 writes 38 or more", d.SchemaVersion)
	}
	ids := map[int]string{}
	stateMapped := 0
	for _, p := range panelsOf(d.Panels) {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type != "row" && (p.Datasource == nil || p.Datasource.UID != "${datasource}") {
			t.Errorf("panel %q: data source is not ${datasource}", p.Title)
		}
		if len(p.Targets) == 0 || !strings.HasPrefix(p.Targets[0].Expr, "gpu_turnstile_state{") {
			continue
		}
		stateMapped++
		names := map[string]string{}
		for _, mp := range p.FieldConfig.Defaults.Mappings {
			for v, o := range mp.Options {
				names[v] = o.Text
			}
		}
		for _, s := range lock.States {
			if got := names[strconv.Itoa(int(s))]; got != s.String() {
				t.Errorf("panel %q maps %d to %q, the lock calls it %q", p.Title, s, got, s.String())
			}
		}
	}
	if stateMapped == 0 {
		t.Error("no panel shows gpu_turnstile_state")
	}
}

// The PromQL reader finds the metrics and labels of the forms the
// dashboard uses.
func TestParsePromQL(t *testing.T) {
	for _, c := range []struct {
		expr     string
		sels     []promSelector
		grouping []string
	}{
		{`gpu_turnstile_state{turnstile=~"$turnstile"}`, []promSelector{{"gpu_turnstile_state", []string{"turnstile"}}}, nil},
		{`histogram_quantile(0.95, sum by (turnstile, le) (rate(a_bucket{kind="llm", turnstile=~"$turnstile"}[$__rate_interval])))`,
			[]promSelector{{"a_bucket", []string{"kind", "turnstile"}}}, []string{"turnstile", "le"}},
		{`60 * sum without(op)(rate(b_total[5m] offset 1h)) / on (turnstile) group_left c`,
			[]promSelector{{"b_total", nil}, {"c", nil}}, []string{"op", "turnstile"}},
		{`max(d{l="a}b,c"}) > bool 2 and e`, []promSelector{{"d", []string{"l"}}, {"e", nil}}, nil},
	} {
		sels, grouping, err := parsePromQL(c.expr)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		if fmt.Sprint(sels) != fmt.Sprint(c.sels) || !slices.Equal(grouping, c.grouping) {
			t.Errorf("%s:\n got %v by %v\nwant %v by %v", c.expr, sels, grouping, c.sels, c.grouping)
		}
	}
}
