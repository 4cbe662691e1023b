package controllers

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics/testutil"
)

// TestRefusalEventsAreNotWritten: an Event whose message reports a write
// the fleet refused is answered as one that exists already and never
// reaches the apiserver, in either Events API and either encoding; every
// other write, an ordinary Event or an object merely quoting a refusal,
// reaches it whole.
func TestRefusalEventsAreNotWritten(t *testing.T) {
	registerMetrics()
	var mu sync.Mutex
	var received []string // method path body
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		received = append(received, r.Method+" "+r.URL.Path+" "+string(body))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		kind, version := "ConfigMap", "v1"
		if strings.Contains(r.URL.Path, "/events") {
			kind = "Event"
			if strings.HasPrefix(r.URL.Path, "/apis/events.k8s.io/") {
				version = "events.k8s.io/v1"
			}
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"kind":"`+kind+`","apiVersion":"`+version+`","metadata":{"name":"x","namespace":"team-a"}}`)
	}))
	defer server.Close()
	refusal := "Failed to create new replica set \"web-0-1\": " + ErrPartitionMoved.Error() + ": POST /apis/apps/v1/namespaces/team-a/replicasets"
	coreEvent := func(message string) *corev1.Event {
		return &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "web-0.1", Namespace: "team-a"},
			InvolvedObject: corev1.ObjectReference{Kind: "Deployment", Namespace: "team-a", Name: "web-0"},
			Type:           corev1.EventTypeWarning, Reason: "ReplicaSetCreateError", Message: message,
		}
	}
	for _, contentType := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
		config := &rest.Config{
			Host:          server.URL,
			ContentConfig: rest.ContentConfig{ContentType: contentType},
			WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
				return fencedRoundTripper{next: rt}
			},
		}
		client, err := kubernetes.NewForConfig(config)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for _, tc := range []struct {
			name    string
			write   func() error
			dropped bool
			// reaches: what the apiserver must receive of the write.
			reaches string
		}{
			{
				name: "a core Event reporting a partition's refusal",
				write: func() error {
					_, err := client.CoreV1().Events("team-a").Create(ctx, coreEvent(refusal), metav1.CreateOptions{})
					return err
				},
				dropped: true,
			},
			{
				name: "an events.k8s.io Event reporting a lapse of authority",
				write: func() error {
					_, err := client.EventsV1().Events("team-a").Create(ctx, &eventsv1.Event{
						ObjectMeta: metav1.ObjectMeta{Name: "web-0.2", Namespace: "team-a"},
						Regarding:  corev1.ObjectReference{Kind: "Deployment", Namespace: "team-a", Name: "web-0"},
						Type:       corev1.EventTypeWarning, Reason: "ReplicaSetCreateError", Note: "Post: " + ErrNoAuthority.Error(),
						ReportingController: "deployment-controller", ReportingInstance: "x", Action: "Create",
					}, metav1.CreateOptions{})
					return err
				},
				dropped: true,
			},
			{
				name: "a core Event updated to report a stopped singleton's refusal",
				write: func() error {
					_, err := client.CoreV1().Events("team-a").Update(ctx, coreEvent(ErrPieceStopped.Error()), metav1.UpdateOptions{})
					return err
				},
				dropped: true,
			},
			{
				name: "an ordinary Event",
				write: func() error {
					_, err := client.CoreV1().Events("team-a").Create(ctx, coreEvent("Scaled up replica set web-0-1 to 3"), metav1.CreateOptions{})
					return err
				},
				reaches: "Scaled up replica set web-0-1 to 3",
			},
			{
				name: "an Event's count patched",
				write: func() error {
					_, err := client.CoreV1().Events("team-a").Patch(ctx, "web-0.1", types.StrategicMergePatchType, []byte(`{"count":2}`), metav1.PatchOptions{})
					return err
				},
				reaches: `{"count":2}`,
			},
			{
				name: "a ConfigMap quoting a refusal",
				write: func() error {
					_, err := client.CoreV1().ConfigMaps("team-a").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "notes"}, Data: map[string]string{"seen": refusal}}, metav1.CreateOptions{})
					return err
				},
				reaches: ErrPartitionMoved.Error(),
			},
		} {
			t.Run(contentType+"/"+tc.name, func(t *testing.T) {
				mu.Lock()
				received = nil
				mu.Unlock()
				before := counterValueOf(t)
				err := tc.write()
				mu.Lock()
				got := received
				mu.Unlock()
				if tc.dropped {
					if !apierrors.IsAlreadyExists(err) {
						t.Errorf("answered %v, want AlreadyExists", err)
					}
					if len(got) > 0 {
						t.Errorf("the apiserver received %q", got)
					}
					if counterValueOf(t) != before+1 {
						t.Errorf("fleet_refusal_events_dropped_total did not count it")
					}
					return
				}
				if err != nil {
					t.Fatalf("answered %v", err)
				}
				if len(got) != 1 || !strings.Contains(got[0], tc.reaches) {
					t.Errorf("the apiserver received %q, want one request carrying %q", got, tc.reaches)
				}
			})
		}
	}
}

func counterValueOf(t *testing.T) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(refusalEventsDropped)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
