package controllers

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// movingAuthority is a replica's authority that runs until a deadline,
// which renewals move.
type movingAuthority struct {
	mu    sync.Mutex
	until time.Time
}

func (a *movingAuthority) Authority() (bool, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return time.Now().Before(a.until), a.until
}

func (a *movingAuthority) Valid() bool { ok, _ := a.Authority(); return ok }

func (a *movingAuthority) set(until time.Time) {
	a.mu.Lock()
	a.until = until
	a.mu.Unlock()
}

func TestAbandonAtDeadline(t *testing.T) {
	tests := []struct {
		name string
		// answerAfter: how long the apiserver takes to answer.
		answerAfter time.Duration
		// renew: authority is renewed every 50 ms while the write is
		// in flight.
		renew      bool
		wantErr    bool
		wantClosed bool // the server saw the connection go away
	}{
		{name: "answered before the deadline", answerAfter: 10 * time.Millisecond},
		{name: "renewed while in flight", answerAfter: 600 * time.Millisecond, renew: true},
		{name: "authority runs out in flight", answerAfter: time.Minute, wantErr: true, wantClosed: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gone, done := make(chan struct{}), make(chan struct{})
			server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-time.After(tc.answerAfter):
					w.WriteHeader(http.StatusCreated)
				case <-r.Context().Done():
					close(gone)
				case <-done:
				}
			}))
			server.EnableHTTP2 = true
			server.StartTLS()
			defer server.Close()
			defer close(done)

			authority := &movingAuthority{until: time.Now().Add(200 * time.Millisecond)}
			stopRenew := make(chan struct{})
			defer close(stopRenew)
			if tc.renew {
				go func() {
					for {
						select {
						case <-stopRenew:
							return
						case <-time.After(50 * time.Millisecond):
							authority.set(time.Now().Add(200 * time.Millisecond))
						}
					}
				}()
			}
			rt := fencedRoundTripper{next: server.Client().Transport, fence: authority}
			req, err := http.NewRequest(http.MethodPost, server.URL+"/api/v1/namespaces/a/configmaps", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			result := make(chan error, 1)
			go func() {
				resp, err := rt.RoundTrip(req)
				if err == nil {
					resp.Body.Close()
					if resp.ProtoMajor != 2 {
						t.Errorf("the test meant HTTP/2, got %s", resp.Proto)
					}
				}
				result <- err
			}()
			select {
			case err := <-result:
				if (err != nil) != tc.wantErr {
					t.Fatalf("write: %v, want error %v", err, tc.wantErr)
				}
				// Said as the fleet's own, so that the Warning Event a
				// controller writes of it is dropped (refusalevents.go).
				if tc.wantErr && !errors.Is(err, ErrWriteAbandoned) {
					t.Fatalf("write: %v, want %v", err, ErrWriteAbandoned)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the write was neither answered nor abandoned")
			}
			if tc.wantClosed {
				select {
				case <-gone:
				case <-time.After(5 * time.Second):
					t.Fatal("the server never saw the abandoned write's connection go away")
				}
			}
		})
	}
}
