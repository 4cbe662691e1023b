//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// TestWriteResetBeforeItsBody checks against kube-apiserver what the
// ownership check's bodyNeverRead rests on: a create whose connection is
// reset after its headers reached the apiserver and before its body did
// (what a replica's write connection does when it resumes past its
// authority) is audited 500 "client disconnected" and creates nothing,
// while the same create with its body sent is audited 201 and is not
// taken for one whose body was never read.
func TestWriteResetBeforeItsBody(t *testing.T) {
	inLane(t, laneLight)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster := startCluster(ctx, t, localcluster.Options{})
	client, err := cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	const ns = "body-reset"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := cluster.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		reset    bool
		wantCode int
	}{
		{name: "sent", wantCode: http.StatusCreated},
		{name: "reset", reset: true, wantCode: http.StatusInternalServerError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var conns []net.Conn
			c := rest.CopyConfig(cfg)
			c.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
				conn, err := (&net.Dialer{}).DialContext(ctx, network, address)
				if err == nil {
					mu.Lock()
					conns = append(conns, conn)
					mu.Unlock()
				}
				return conn, err
			}
			rt, err := rest.TransportFor(c)
			if err != nil {
				t.Fatal(err)
			}
			body, bodyWriter := io.Pipe()
			defer bodyWriter.Close()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Host+"/api/v1/namespaces/"+ns+"/configmaps", body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			answered := make(chan error, 1)
			go func() {
				resp, err := (&http.Client{Transport: rt}).Do(req)
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode != tc.wantCode {
						err = fmt.Errorf("answered %s", resp.Status)
					}
				}
				answered <- err
			}()
			// The headers go out at once on loopback; the apiserver then
			// waits for the body.
			time.Sleep(500 * time.Millisecond)
			if tc.reset {
				mu.Lock()
				for _, conn := range conns {
					_ = conn.(*net.TCPConn).SetLinger(0)
					conn.Close()
				}
				mu.Unlock()
			} else {
				_, _ = io.Copy(bodyWriter, strings.NewReader(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"`+tc.name+`"}}`))
				bodyWriter.Close()
			}
			select {
			case err := <-answered:
				if (err != nil) != tc.reset {
					t.Fatalf("the create: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the create was never answered")
			}

			var audited *auditEvent
			deadline := time.Now().Add(10 * time.Second)
			for audited == nil && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
				readAudit(t, cluster.AuditLog, func(e auditEvent) {
					// A create whose body was never read names no object.
					name := tc.name
					if tc.reset {
						name = ""
					}
					if e.Verb == "create" && e.ObjectRef != nil && e.ObjectRef.Namespace == ns && e.ObjectRef.Resource == "configmaps" && e.ObjectRef.Name == name {
						audited = &e
					}
				})
			}
			if audited == nil {
				t.Fatal("no audit event for the create")
			}
			code, message := 0, ""
			if audited.ResponseStatus != nil {
				code, message = audited.ResponseStatus.Code, audited.ResponseStatus.Message
			}
			t.Logf("audited: %d %q", code, message)
			if code != tc.wantCode || bodyNeverRead(*audited) != tc.reset {
				t.Fatalf("audited %d %q: want %d, body never read %v", code, message, tc.wantCode, tc.reset)
			}
			_, err = client.CoreV1().ConfigMaps(ns).Get(ctx, tc.name, metav1.GetOptions{})
			if exists := !apierrors.IsNotFound(err); exists == tc.reset {
				t.Fatalf("ConfigMap %s: %v, want it to exist: %v", tc.name, err, !tc.reset)
			}
		})
	}
}
