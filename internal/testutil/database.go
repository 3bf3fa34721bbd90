package testutil

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
)

// databases numbers the names DatabaseName gives.
var databases atomic.Int64

// DatabaseName is the name of a PostgreSQL database of the test's own: the test's name as an identifier, after a
// number of its own, so that a test run twice on the same server (go test -count=2) creates another database,
// cut to PostgreSQL's 63 bytes.
func DatabaseName(t testing.TB) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, fmt.Sprintf("t%d_%s", databases.Add(1), strings.ToLower(t.Name())))
	return name[:min(len(name), 63)]
}
