package appsetreport

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// TestMemoMatchesAFullEvaluation: evaluations through a memo, as Applications come, change their status and
// resources, stop being pull-model Applications and go, give the statuses a full evaluation of the same
// Applications gives. The memo keeps the Applications' resources only: their states are observed again each time.
func TestMemoMatchesAFullEvaluation(t *testing.T) {
	limits := DefaultLimits()
	limits.MaxResources = 4
	version := 0
	versioned := func(a *argocd.Application) argocd.Application {
		version++
		a.ResourceVersion = strconv.Itoa(version)
		return *a
	}
	apps := map[string]argocd.Application{}
	set := func(name, cluster string, st map[string]any) {
		apps[name] = versioned(app(name, cluster, st))
	}
	m := newMemo()
	steps := []struct {
		name   string
		change func()
	}{
		{"first Applications", func() {
			for i := range 3 {
				set(fmt.Sprintf("a%d", i), fmt.Sprintf("c%d", i), status("OutOfSync", "Missing", withResources("Service/web", fmt.Sprintf("Deployment/d%d", i))))
			}
		}},
		{"one synced", func() { set("a0", "c0", status("Synced", "Healthy", withResources("Service/web", "Deployment/d0"))) }},
		{"one deploys other resources", func() {
			set("a1", "c1", status("Synced", "Progressing", withResources("Service/web", "Deployment/d9", "ConfigMap/cm")))
		}},
		{"more than the report lists", func() {
			for i := 3; i < 6; i++ {
				set(fmt.Sprintf("a%d", i), "c3", status("Synced", "Healthy", withResources(fmt.Sprintf("Secret/s%d", i))))
			}
		}},
		{"one no longer pull-model", func() {
			a := app("a2", "c2", status("Synced", "Healthy"))
			a.SetLabels(nil)
			apps["a2"] = versioned(a)
		}},
		{"some go", func() { delete(apps, "a3"); delete(apps, "a1") }},
		{"all go", func() { clear(apps) }},
		{"one comes back", func() { set("a0", "c0", status("Synced", "Healthy", withResources("Service/web"))) }},
	}
	for _, step := range steps {
		step.change()
		var list []*argocd.Application
		var pull []Observed
		for _, name := range slices.Sorted(maps.Keys(apps)) {
			a := apps[name]
			list = append(list, &a)
			if argocd.IsPullApplication(&a) {
				pull = append(pull, Observe(&a))
			}
		}
		observed := m.observe(list)
		refs, omitted := m.resources(limits.MaxResources)
		got, want := statuses(observed, refs, omitted, limits), Statuses(pull, limits)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: through the memo\n%+v\nwant\n%+v", step.name, got, want)
		}
		if len(m.apps) != len(pull) {
			t.Fatalf("%s: the memo keeps %d Applications, want %d", step.name, len(m.apps), len(pull))
		}
	}

	// A state is read from the Application each time (the cache's summary changes with the Application, the
	// memo keeps none).
	a0 := apps["a0"]
	a0.StatusSummary().Health = "changed in the cache"
	if got := m.observe([]*argocd.Application{&a0}); got[0].Health != "changed in the cache" {
		t.Fatalf("the state came from the memo: %+v", got[0])
	}
}

// BenchmarkEvaluation evaluates the report of an ApplicationSet of 3,000 Applications, each with resources of its
// own, 30 of which changed since the last evaluation: with every Application observed and its resources sorted
// each time (full), and through the memo; both include making the 30 changed Applications (changes alone).
func BenchmarkEvaluation(b *testing.B) {
	const n, changed = 3000, 30
	limits := DefaultLimits()
	list := make([]*argocd.Application, n)
	for i := range list {
		list[i] = app(fmt.Sprintf("a%04d", i), fmt.Sprintf("c%04d", i),
			status("Synced", "Healthy", withResources(fmt.Sprintf("Service/web-%d", i), fmt.Sprintf("Deployment/web-%d", i))))
		list[i].ResourceVersion = "1"
	}
	change := func(round int) {
		for j := range changed {
			i := (round*changed + j) % n
			health := []string{"Healthy", "Progressing"}[round%2]
			list[i] = app(list[i].Name, fmt.Sprintf("c%04d", i),
				status("Synced", health, withResources(fmt.Sprintf("Service/web-%d", i), fmt.Sprintf("Deployment/web-%d", i))))
			list[i].ResourceVersion = strconv.Itoa(round + 2)
		}
	}
	b.Run("changes alone", func(b *testing.B) {
		for round := 0; b.Loop(); round++ {
			change(round)
		}
	})
	b.Run("full", func(b *testing.B) {
		for round := 0; b.Loop(); round++ {
			change(round)
			apps := make([]Observed, 0, n)
			for i := range list {
				if argocd.IsPullApplication(list[i]) {
					apps = append(apps, Observe(list[i]))
				}
			}
			Statuses(apps, limits)
		}
	})
	b.Run("memo", func(b *testing.B) {
		m := newMemo()
		for round := 0; b.Loop(); round++ {
			change(round)
			apps := m.observe(list)
			refs, omitted := m.resources(limits.MaxResources)
			statuses(apps, refs, omitted, limits)
		}
	})
}
