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
}

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
				Resource string `json:"resource"`
			} `json:"objectRef"`
		}
		if err := dec.Decode(&ev); err != nil {
			if !errors.Is(err, io.EOF) {
				// The apiserver may be writing the last line still.
				klog.ErrorS(err, "Reading the audit log; counting what was read")
			}
			break
		}
		cm := isControllerManagerUser(ev.User.Username)
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
			if ev.ObjectRef.Resource == "leases" {
				counts.leaseWrites++
			}
		}
	}
	return counts, nil
}

// addFigures adds the counts to a run's figures.
func (c auditCounts) addFigures(figures map[string]float64) {
	for verb, n := range c.writes {
		figures["cm_writes_"+verb] = n
	}
	figures["cm_lists"], figures["other_lists"] = c.cmLists, c.otherLists
	figures["cm_watches"], figures["other_watches"] = c.cmWatches, c.otherWatches
}
