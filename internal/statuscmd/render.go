package statuscmd

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
	"github.com/argocd-pull/argocd-pull/internal/appsetreport"
)

// Output formats.
const (
	OutputTable = ""
	OutputWide  = "wide"
	OutputJSON  = "json"
	OutputYAML  = "yaml"
)

// View is what `argocd-pull status` shows: the counts of each ApplicationSet and the state of each
// pull-model Application.
type View struct {
	ApplicationSets []AppSet      `json:"applicationSets"`
	Applications    []Application `json:"applications"`
}

// AppSet counts the Applications of one ApplicationSet by state, as its MulticlusterApplicationSetReport does.
type AppSet struct {
	Namespace    string `json:"namespace"`
	Name         string `json:"name"`
	Applications int    `json:"applications"`
	Clusters     int    `json:"clusters"`
	Synced       int    `json:"synced"`
	NotSynced    int    `json:"notSynced"`
	Healthy      int    `json:"healthy"`
	NotHealthy   int    `json:"notHealthy"`
	InProgress   int    `json:"inProgress"`
}

// Application is the state of one pull-model Application on its managed cluster.
type Application struct {
	Namespace      string                  `json:"namespace"`
	Name           string                  `json:"name"`
	ApplicationSet string                  `json:"applicationSet,omitempty"`
	Cluster        string                  `json:"cluster"`
	Sync           string                  `json:"sync"`
	Health         string                  `json:"health"`
	Revision       string                  `json:"revision,omitempty"`
	OperationPhase string                  `json:"operationPhase,omitempty"`
	StartedAt      string                  `json:"operationStartedAt,omitempty"`
	Message        string                  `json:"message,omitempty"`
	Conditions     []v1alpha1.AppCondition `json:"conditions,omitempty"`
}

// NewApplication is the row of one observed Application.
func NewApplication(o appsetreport.Observed) Application {
	return Application{
		Namespace: o.Namespace, Name: o.Name, ApplicationSet: o.AppSet, Cluster: o.Cluster,
		Sync: cmp.Or(o.Sync, appsetreport.StatusUnknown), Health: cmp.Or(o.Health, appsetreport.StatusUnknown),
		Revision: o.Revision, OperationPhase: o.OperationPhase, StartedAt: o.OperationStartedAt,
		Message: o.Message(), Conditions: o.Conditions,
	}
}

// NewView builds the fleet view of the observed Applications, sorted by namespace and name.
func NewView(apps []appsetreport.Observed) *View {
	f := &View{ApplicationSets: []AppSet{}, Applications: make([]Application, 0, len(apps))}
	byAppSet := map[[2]string][]appsetreport.Observed{}
	for _, o := range apps {
		f.Applications = append(f.Applications, NewApplication(o))
		if o.AppSet != "" {
			key := [2]string{o.Namespace, o.AppSet}
			byAppSet[key] = append(byAppSet[key], o)
		}
	}
	for key, members := range byAppSet {
		c := appsetreport.Count(members)
		f.ApplicationSets = append(f.ApplicationSets, AppSet{
			Namespace: key[0], Name: key[1], Applications: c.Applications, Clusters: c.Clusters,
			Synced: c.Synced, NotSynced: c.NotSynced, Healthy: c.Healthy, NotHealthy: c.NotHealthy, InProgress: c.InProgress,
		})
	}
	slices.SortFunc(f.ApplicationSets, func(a, b AppSet) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	slices.SortFunc(f.Applications, func(a, b Application) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return f
}

// printer writes a fleet and its changes in one output format.
type printer struct {
	w             io.Writer
	output        string
	allNamespaces bool
	// events adds an EVENT column to the Applications (watch mode).
	events bool
	// widths of the Applications table's columns, kept so that rows printed later line up.
	widths []int
}

// messageWidth is the most characters of a message the table shows (wide shows it whole).
const messageWidth = 72

// printView writes the whole fleet.
func (p *printer) printView(f *View) error {
	switch p.output {
	case OutputJSON:
		return p.writeJSON(f, true)
	case OutputYAML:
		return p.writeYAML(f)
	}
	appSets := [][]string{p.appSetHeader()}
	for _, a := range f.ApplicationSets {
		appSets = append(appSets, p.appSetRow(a))
	}
	apps := [][]string{p.appHeader()}
	for _, a := range f.Applications {
		apps = append(apps, p.appRow("ADDED", a))
	}
	if len(f.ApplicationSets) > 0 {
		if err := writeTable(p.w, appSets, nil); err != nil {
			return err
		}
		if _, err := fmt.Fprintln(p.w); err != nil {
			return err
		}
	}
	p.widths = columnWidths(apps)
	if p.events {
		// Room for the longest event type, so that the rows printed later line up.
		p.widths[0] = max(p.widths[0], len("MODIFIED"))
	}
	return writeTable(p.w, apps, p.widths)
}

// Event is a change of one Application in watch mode.
type Event struct {
	Type        string      `json:"type"`
	Application Application `json:"application"`
}

// printEvent writes the change of one Application.
func (p *printer) printEvent(typ string, a Application) error {
	switch p.output {
	case OutputJSON:
		return p.writeJSON(Event{Type: typ, Application: a}, false)
	case OutputYAML:
		if _, err := fmt.Fprintln(p.w, "---"); err != nil {
			return err
		}
		return p.writeYAML(Event{Type: typ, Application: a})
	}
	row := [][]string{p.appRow(typ, a)}
	for i, w := range columnWidths(row) {
		if i < len(p.widths) {
			p.widths[i] = max(p.widths[i], w)
		}
	}
	return writeTable(p.w, row, p.widths)
}

func (p *printer) wide() bool { return p.output == OutputWide }

func (p *printer) appSetHeader() []string {
	h := []string{"APPLICATIONSET"}
	if p.allNamespaces {
		h = append([]string{"NAMESPACE"}, h...)
	}
	if p.wide() {
		h = append(h, "APPLICATIONS")
	}
	return append(h, "CLUSTERS", "SYNCED", "NOT SYNCED", "HEALTHY", "NOT HEALTHY", "IN PROGRESS")
}

func (p *printer) appSetRow(a AppSet) []string {
	r := []string{a.Name}
	if p.allNamespaces {
		r = append([]string{a.Namespace}, r...)
	}
	if p.wide() {
		r = append(r, strconv.Itoa(a.Applications))
	}
	return append(r, strconv.Itoa(a.Clusters), strconv.Itoa(a.Synced), strconv.Itoa(a.NotSynced),
		strconv.Itoa(a.Healthy), strconv.Itoa(a.NotHealthy), strconv.Itoa(a.InProgress))
}

func (p *printer) appHeader() []string {
	var h []string
	if p.events {
		h = append(h, "EVENT")
	}
	if p.allNamespaces {
		h = append(h, "NAMESPACE")
	}
	h = append(h, "APPLICATION", "APPLICATIONSET", "CLUSTER", "SYNC", "HEALTH")
	if p.wide() {
		h = append(h, "REVISION", "OPERATION", "STARTED", "CONDITIONS")
	}
	return append(h, "MESSAGE")
}

func (p *printer) appRow(event string, a Application) []string {
	var r []string
	if p.events {
		r = append(r, event)
	}
	if p.allNamespaces {
		r = append(r, a.Namespace)
	}
	r = append(r, a.Name, cmp.Or(a.ApplicationSet, "<none>"), cmp.Or(a.Cluster, "<none>"), a.Sync, a.Health)
	message := oneLine(a.Message)
	if p.wide() {
		types := make([]string, 0, len(a.Conditions))
		for _, c := range a.Conditions {
			types = append(types, c.Type)
		}
		r = append(r, cmp.Or(shortRevision(a.Revision), "<none>"), cmp.Or(a.OperationPhase, "<none>"),
			cmp.Or(a.StartedAt, "<none>"), cmp.Or(strings.Join(types, ","), "<none>"))
	} else {
		message = appsetreport.Truncate(message, messageWidth)
	}
	return append(r, message)
}

// shortRevision shortens a git commit to 8 characters, as Argo CD's CLI does; other revisions stay whole.
func shortRevision(r string) string {
	if len(r) == 40 && strings.Trim(r, "0123456789abcdef") == "" {
		return r[:8]
	}
	return r
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func columnWidths(rows [][]string) []int {
	var widths []int
	for _, row := range rows {
		for i, cell := range row {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], len([]rune(cell)))
		}
	}
	return widths
}

// writeTable writes rows as kubectl does: columns three spaces apart, no spaces at the end of a line.
func writeTable(w io.Writer, rows [][]string, widths []int) error {
	if widths == nil {
		widths = columnWidths(rows)
	}
	var b, line strings.Builder
	for _, row := range rows {
		line.Reset()
		for i, cell := range row {
			line.WriteString(cell)
			if i < len(row)-1 {
				line.WriteString(strings.Repeat(" ", widths[i]-len([]rune(cell))+3))
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (p *printer) writeJSON(v any, indent bool) error {
	var data []byte
	var err error
	if indent {
		data, err = json.MarshalIndent(v, "", "  ")
	} else {
		data, err = json.Marshal(v)
	}
	if err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	_, err = fmt.Fprintln(p.w, string(data))
	return err
}

func (p *printer) writeYAML(v any) error {
	data, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode yaml: %w", err)
	}
	_, err = p.w.Write(data)
	return err
}

// Table writes the tables `argocd-pull status` prints (each ApplicationSet's counts, then each Application) for
// the given Applications; `argocd-pull demo` shows its progress with it.
func Table(w io.Writer, apps []appsetreport.Observed) error {
	p := &printer{w: w}
	return p.printView(NewView(apps))
}
