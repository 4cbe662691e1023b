//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"math/big"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// auditEvent is the part of an audit.k8s.io/v1 Event the tests read.
type auditEvent struct {
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	Verb       string `json:"verb"`
	UserAgent  string `json:"userAgent"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource  string `json:"resource"`
		APIGroup  string `json:"apiGroup"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"responseStatus"`
	// RequestReceivedTimestamp is when the apiserver had the request;
	// StageTimestamp, at ResponseComplete, when it had answered it: a
	// write takes effect between the two.
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
	StageTimestamp           time.Time `json:"stageTimestamp"`
}

// bodyNeverRead says whether the apiserver failed a write while still
// reading its body because the client went away: answered 500 with the
// HTTP/2 server's "client disconnected" (the request body's error, which
// the create, update and patch handlers answer as is). Such a write was
// never decoded and cannot have taken effect, whenever it was answered
// (TestWriteResetBeforeItsBody).
func bodyNeverRead(e auditEvent) bool {
	return e.ResponseStatus != nil && e.ResponseStatus.Code == 500 && e.ResponseStatus.Message == "client disconnected"
}

func readAudit(t *testing.T, path string, fn func(auditEvent)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("opening audit log: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e auditEvent
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			fn(e)
		}
	}
}

// leaseWrites counts successful Lease writes per fleet member (by user
// agent) between from and to.
func leaseWrites(t *testing.T, path string, from, to time.Time) map[string]int {
	out := map[string]int{}
	readAudit(t, path, func(e auditEvent) {
		if e.ObjectRef == nil || e.ObjectRef.Resource != "leases" || e.StageTimestamp.Before(from) || e.StageTimestamp.After(to) {
			return
		}
		if e.ResponseStatus == nil || e.ResponseStatus.Code >= 300 {
			return
		}
		if rest, ok := strings.CutPrefix(e.UserAgent, "fleet-controller-manager/"); ok {
			member, _, _ := strings.Cut(rest, "/")
			out[member]++
		}
	})
	return out
}

// cacheRequests are a replica's owned cache's requests, from the audit log
// of a cluster started with localcluster.Options.AuditReads, by resource.
type cacheRequests struct {
	// lists and watches made since the time asked for; scoped: the
	// watches among them that named namespaces (a shard selector or a
	// namespace's path).
	lists, watches, scoped map[string]int
	// listed: the lists made since the time asked for, in order; allListed:
	// every list, whenever made.
	listed, allListed []auditedList
	// watchEnded: per resource, when each of its watches ended (refused
	// at once, or closed after it streamed), whenever made.
	watchEnded map[string][]time.Time
	// open: watches open when the log was read (whenever made).
	open map[string]int
}

// ownedCacheRequests reads replica's owned cache's requests: those whose
// user agent is fleet-controller-manager/<replica>/owned-cache.
func ownedCacheRequests(t *testing.T, auditLog, replica string, since time.Time) cacheRequests {
	t.Helper()
	r := cacheRequests{lists: map[string]int{}, watches: map[string]int{}, scoped: map[string]int{}, open: map[string]int{}, watchEnded: map[string][]time.Time{}}
	agent := "fleet-controller-manager/" + replica + "/owned-cache"
	readAudit(t, auditLog, func(e auditEvent) {
		if e.ObjectRef == nil || !strings.HasPrefix(e.UserAgent, agent) {
			return
		}
		resource := e.ObjectRef.Resource
		switch {
		case e.Verb == "watch" && e.Stage == "ResponseStarted":
			r.open[resource]++
			if e.StageTimestamp.Before(since) {
				return
			}
			r.watches[resource]++
			if strings.Contains(e.RequestURI, "shardSelector=") || strings.Contains(e.RequestURI, "/namespaces/") {
				r.scoped[resource]++
			}
		case e.Verb == "watch" && e.Stage == "ResponseComplete":
			r.watchEnded[resource] = append(r.watchEnded[resource], e.StageTimestamp)
			// A watch refused before it streamed completes without
			// having started.
			if e.ResponseStatus == nil || e.ResponseStatus.Code == 200 {
				r.open[resource]--
			}
		case e.Verb == "list" && e.Stage == "ResponseComplete":
			l := auditedList{resource: resource, uri: e.RequestURI, at: e.RequestReceivedTimestamp}
			r.allListed = append(r.allListed, l)
			if !e.StageTimestamp.Before(since) {
				r.lists[resource]++
				r.listed = append(r.listed, l)
			}
		}
	})
	return r
}

// auditedList is one list request.
type auditedList struct {
	resource, uri string
	at            time.Time
}

// relistAfterWatchEnd tells whether the list of resource received at at
// is the cache listing the kind again because its watch ended: the first
// list of it since its last watch ended before at, within
// relistAfterWatchEndWithin of that end. It returns when that watch ended.
func (r cacheRequests) relistAfterWatchEnd(resource string, at time.Time) (time.Time, bool) {
	var ended time.Time
	for _, e := range r.watchEnded[resource] {
		if !e.After(at) && e.After(ended) {
			ended = e
		}
	}
	if ended.IsZero() || at.Sub(ended) > relistAfterWatchEndWithin {
		return ended, false
	}
	for _, l := range r.allListed {
		if l.resource == resource && l.at.After(ended) && l.at.Before(at) {
			return ended, false
		}
	}
	return ended, true
}

// firstList tells whether the list of resource at at is the first the
// cache made of it: the kind started being cached then (a controller asked
// for it), so every loaded namespace is listed.
func (r cacheRequests) firstList(resource string, at time.Time) bool {
	for _, l := range r.allListed {
		if l.resource == resource && l.at.Before(at) {
			return false
		}
	}
	return true
}

// relistAfterWatchEndWithin bounds how long after its watch ended a kind
// is listed again for it: the owned cache resumes a watch after at most
// 16 s (8 s doubled by jitter) when kube-apiserver ended it early, and
// relists at once when told its version is gone; a minute more covers a
// loaded machine.
const relistAfterWatchEndWithin = 90 * time.Second

// shardRangeRE finds each range of a shard selector.
var shardRangeRE = regexp.MustCompile(`shardRange\(object\.metadata\.namespace, '0x([0-9a-f]+)', '0x([0-9a-f]+)'\)`)

// selectorNamespaces are the namespace hashes a list's shard selector
// names, one point range [h, h+1) each; none for a list without a
// selector or with a range wider than one namespace (such a list reads
// every namespace whose hash it covers, not namespaces it names).
func selectorNamespaces(uri string) []string {
	unescaped, err := url.QueryUnescape(uri)
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range shardRangeRE.FindAllStringSubmatch(unescaped, -1) {
		start, ok1 := new(big.Int).SetString(m[1], 16)
		end, ok2 := new(big.Int).SetString(m[2], 16)
		if !ok1 || !ok2 || new(big.Int).Sub(end, start).Cmp(big.NewInt(1)) != 0 {
			return nil
		}
		out = append(out, m[1])
	}
	return out
}

// firstListOfNamespaces: l names namespaces by shard selector, and no
// earlier list of its kind by this replica named any of them. Such a list
// loads them for the first time (a load the previous step started and the
// apiserver answered late), it does not list them again.
func (r cacheRequests) firstListOfNamespaces(l auditedList) bool {
	named := selectorNamespaces(l.uri)
	if len(named) == 0 {
		return false
	}
	for _, e := range r.allListed {
		if e.resource != l.resource || !e.at.Before(l.at) {
			continue
		}
		for _, ns := range selectorNamespaces(e.uri) {
			if slices.Contains(named, ns) {
				return false
			}
		}
	}
	return true
}
