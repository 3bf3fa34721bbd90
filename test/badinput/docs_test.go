package badinput

import (
	"os"
	"strings"
	"testing"
)

// TestCatalogueIsDocumented checks that docs/reliability.md lists every kind of the catalogue, in a table row
// of its own, and no kind the catalogue does not have.
func TestCatalogueIsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/reliability.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	inCatalogue := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			inCatalogue = strings.HasPrefix(line, "## Bad input")
		case inCatalogue && strings.HasPrefix(line, "| "):
			if cells := strings.Split(line, "|"); len(cells) > 3 && strings.TrimSpace(cells[2]) != "input" {
				documented[strings.Trim(strings.TrimSpace(cells[2]), "`")] = true
			}
		}
	}
	var kinds []string
	for _, c := range applicationCases() {
		kinds = append(kinds, c.kind)
	}
	for _, c := range eventCases() {
		kinds = append(kinds, c.kind)
	}
	for _, c := range restCases() {
		kinds = append(kinds, c.kind)
	}
	for _, c := range tokenCases() {
		kinds = append(kinds, c.kind)
	}
	for _, k := range kinds {
		if !documented[k] {
			t.Errorf("docs/reliability.md does not list %q in its bad input table", k)
		}
		delete(documented, k)
	}
	for k := range documented {
		t.Errorf("docs/reliability.md lists %q, which the catalogue does not have", k)
	}
	if len(kinds) < 15 {
		t.Errorf("the catalogue has %d kinds", len(kinds))
	}
}
