package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/klog/v2"
)

// auditCounts is what the apiserver's audit log says the clients asked of
// it during a run: the controller managers' writes, and everyone's lists
// and watches split between the controller managers and the other clients
// (kube-scheduler, kwok, the harness), which the apiserver's own request
// metrics cannot tell apart.
type auditCounts struct {
	writes                  map[string]float64 // controller managers' writes by verb
	leaseWrites             float64            // controller managers' Lease writes
	cmLists, otherLists     float64
	cmWatches, otherWatches float64
	// cmEventWrites: the controller managers' Event creates and patches
	// (each controller's recorder drops what its sink cannot keep up with,
	// so a system with more sinks writes more of them).
	cmEventWrites float64
	// kwok's Pod status patches, those refused, and its Pod WATCH
	// requests. Released kwok v0.8.0 watches Pods from resourceVersion 0
	// each time, so each watch after its first replays every Pod and kwok
	// plays a stage again for each Pod it has not yet patched (the second
	// patch is refused: two pod IPs); the harness's build resumes from
	// the version it reached, as a kubelet does (Makefile), and these
	// figures show that it does.
	kwokPodPatches, kwokPodPatchesRefused, kwokPodWatches float64
}

// kwokUser is the harness's kwok identity (test/localcluster).
const kwokUser = "kwok"

// isControllerManagerUser says whether an audited user is a controller
// manager: KCM's or the fleet's own identity, or a controller's service
// account (--use-service-account-credentials).
func isControllerManagerUser(name string) bool {
	return name == "system:kube-controller-manager" || strings.HasPrefix(name, "system:serviceaccount:kube-system:")
}

// readAuditCounts counts the audit log from offset on. A watch is counted
// when its response starts (its ResponseStarted stage), as the apiserver
// counts a WATCH request; a list, a write when they complete.
func readAuditCounts(path string, offset int64) (auditCounts, error) {
	counts := auditCounts{writes: map[string]float64{}}
	f, err := os.Open(path)
	if err != nil {
		return counts, fmt.Errorf("opening the audit log: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return counts, fmt.Errorf("seeking in the audit log: %w", err)
	}
	dec := json.NewDecoder(bufio.NewReaderSize(f, 1<<20))
	for {
		var ev struct {
			Stage     string                    `json:"stage"`
			Verb      string                    `json:"verb"`
			User      struct{ Username string } `json:"user"`
			ObjectRef struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
			} `json:"objectRef"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
		}
		if err := dec.Decode(&ev); err != nil {
			if !errors.Is(err, io.EOF) {
				// The apiserver may be writing the last line still.
				klog.ErrorS(err, "Reading the audit log; counting what was read")
			}
			break
		}
		cm := isControllerManagerUser(ev.User.Username)
		counts.countKwok(ev.User.Username, ev.Stage, ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Subresource, ev.ResponseStatus.Code)
		switch {
		case ev.Verb == "watch":
			if ev.Stage != "ResponseStarted" {
				continue
			}
			if cm {
				counts.cmWatches++
			} else {
				counts.otherWatches++
			}
		case ev.Stage != "ResponseComplete":
		case ev.Verb == "list":
			if cm {
				counts.cmLists++
			} else {
				counts.otherLists++
			}
		case cm && ev.Verb != "get":
			counts.writes[ev.Verb]++
			switch ev.ObjectRef.Resource {
			case "leases":
				counts.leaseWrites++
			case "events":
				if ev.Verb == "create" || ev.Verb == "patch" {
					counts.cmEventWrites++
				}
			}
		}
	}
	return counts, nil
}

// countKwok counts kwok's Pod watches (when the response starts) and Pod
// status patches (when complete; refused: any code from 400 on).
func (c *auditCounts) countKwok(user, stage, verb, resource, subresource string, code int) {
	if user != kwokUser || resource != "pods" {
		return
	}
	switch {
	case verb == "watch" && stage == "ResponseStarted":
		c.kwokPodWatches++
	case verb == "patch" && subresource == "status" && stage == "ResponseComplete":
		c.kwokPodPatches++
		if code >= 400 {
			c.kwokPodPatchesRefused++
		}
	}
}

// addFigures adds the counts to a run's figures.
func (c auditCounts) addFigures(figures map[string]float64) {
	for verb, n := range c.writes {
		figures["cm_writes_"+verb] = n
	}
	figures["cm_lists"], figures["other_lists"] = c.cmLists, c.otherLists
	figures["cm_watches"], figures["other_watches"] = c.cmWatches, c.otherWatches
	figures["cm_event_writes"] = c.cmEventWrites
	figures["kwok_pod_patches"], figures["kwok_pod_patches_refused"], figures["kwok_pod_watches"] = c.kwokPodPatches, c.kwokPodPatchesRefused, c.kwokPodWatches
}
