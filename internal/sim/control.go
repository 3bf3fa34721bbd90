package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync"
)

// The simulator's controls, served beside its metrics so that a benchmark can run the simulated fleet in a
// process of its own (its memory and CPU then measured apart from the benchmark's): POST /churn?perSecond=N
// sets the churn, GET /events streams the statuses the fleet sends, one JSON Event a line, and /debug/pprof/
// serves Go's profiles.

// eventFeed hands the statuses the fleet sends to the open /events streams.
type eventFeed struct {
	mu   sync.Mutex
	subs map[chan Event]struct{}
}

// eventBuffer is how many events a stream may fall behind before events are dropped for it.
const eventBuffer = 65536

func newEventFeed() *eventFeed { return &eventFeed{subs: map[chan Event]struct{}{}} }

// publish passes an event to every stream; a stream that fell too far behind misses it.
func (f *eventFeed) publish(e Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ch := range f.subs {
		select {
		case ch <- e:
		default:
		}
	}
}

func (f *eventFeed) subscribe() (<-chan Event, func()) {
	ch := make(chan Event, eventBuffer)
	f.mu.Lock()
	f.subs[ch] = struct{}{}
	f.mu.Unlock()
	return ch, func() {
		f.mu.Lock()
		delete(f.subs, ch)
		f.mu.Unlock()
	}
}

// controlHandlers are the /churn, /events and /applications (the fleet's Applications as JSON, for fault tests)
// handlers of a fleet, and Go's /debug/pprof.
func controlHandlers(f *Fleet, feed *eventFeed) map[string]http.Handler {
	return map[string]http.Handler{
		"/applications": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(f.Applications())
		}),
		"/debug/pprof/":        http.HandlerFunc(pprof.Index),
		"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
		"/debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
		"/churn": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				http.Error(w, "POST /churn?perSecond=N", http.StatusMethodNotAllowed)
				return
			}
			rate, err := strconv.ParseFloat(r.URL.Query().Get("perSecond"), 64)
			if err != nil || rate < 0 {
				http.Error(w, fmt.Sprintf("perSecond must be a number of changes per second, not %q", r.URL.Query().Get("perSecond")), http.StatusBadRequest)
				return
			}
			f.SetChurn(rate)
		}),
		"/events": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			events, stop := feed.subscribe()
			defer stop()
			flusher, _ := w.(http.Flusher)
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			if flusher != nil {
				flusher.Flush()
			}
			enc := json.NewEncoder(w)
			for {
				select {
				case <-r.Context().Done():
					return
				case e := <-events:
					if err := enc.Encode(e); err != nil {
						return
					}
					// Send what is queued in one write.
					for len(events) > 0 {
						if err := enc.Encode(<-events); err != nil {
							return
						}
					}
					if flusher != nil {
						flusher.Flush()
					}
				}
			}
		}),
	}
}
