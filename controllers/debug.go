package controllers

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"k8s.io/controller-manager/controller"

	"github.com/fleet-controller-manager/fleet-controller-manager/informers"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
	"k8s.io/klog/v2"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

// DebugHandler serves /debug/controllers/NAME/... for the debuggable
// controllers this replica runs now (the garbage collector's graph), as
// KCM does; a controller that moved away answers 404 here.
func (r *Runtime) DebugHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rest, ok := strings.CutPrefix(req.URL.Path, debugPrefix)
		if !ok {
			http.NotFound(w, req)
			return
		}
		name, _, _ := strings.Cut(rest, "/")
		r.debugMu.RLock()
		h := r.debug[name]
		r.debugMu.RUnlock()
		if h == nil {
			http.Error(w, fmt.Sprintf("controller %q does not run on this replica", name), http.StatusNotFound)
			return
		}
		http.StripPrefix(debugPrefix+name, h).ServeHTTP(w, req)
	})
}

// debugPrefix is where KCM mounts controllers' debugging handlers.
const debugPrefix = "/debug/controllers/"

func (r *Runtime) registerDebug(built []kcmapp.Controller) func() {
	var names []string
	r.debugMu.Lock()
	defer r.debugMu.Unlock()
	for _, c := range built {
		d, ok := c.(controller.Debuggable)
		if !ok {
			continue
		}
		if h := d.DebuggingHandler(); h != nil {
			if r.debug == nil {
				r.debug = map[string]http.Handler{}
			}
			r.debug[c.Name()] = h
			names = append(names, c.Name())
		}
	}
	return func() {
		r.debugMu.Lock()
		defer r.debugMu.Unlock()
		for _, n := range names {
			delete(r.debug, n)
		}
	}
}

// CachePath serves what the replica caches for its partition controllers.
const CachePath = "/debug/fleet/cache"

// OwnedCacheStatus is CachePath's answer: the informer mode, the
// partitions the partition controllers serve, and, with an owned cache,
// the partitions loaded into it, the resources it holds in
// every namespace for the colocated singletons, the field selectors
// narrowing resources (ownedFieldSelectors), and the keys of every object
// it holds, by resource.
type OwnedCacheStatus struct {
	Mode           string              `json:"mode"`
	Served         []int               `json:"served,omitempty"`
	Partitions     []int               `json:"partitions,omitempty"`
	Everywhere     []string            `json:"everywhere,omitempty"`
	FieldSelectors map[string]string   `json:"fieldSelectors,omitempty"`
	Keys           map[string][]string `json:"keys,omitempty"`
	// Loading: the load of partitions in progress, with what the owned
	// cache waits for.
	Loading []shard.LocalLoad `json:"loading,omitempty"`
}

// CacheHandler serves CachePath.
func (r *Runtime) CacheHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		status := OwnedCacheStatus{Mode: string(r.mode), Served: r.table.served(), Loading: r.table.Loads()}
		if r.owned != nil {
			status.Partitions, status.Everywhere, status.Keys = r.owned.Partitions(), r.owned.Everywhere(), r.owned.Keys()
			status.FieldSelectors = r.owned.FieldSelectors()
		}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(status); err != nil {
			klog.FromContext(req.Context()).Error(err, "Writing the cache status")
		}
	})
}

// Loads is the load of partitions in progress on this replica, if any,
// with what it waits for.
func (r *Runtime) Loads() []shard.LocalLoad { return r.table.Loads() }

// InformersPath serves, per piece this replica runs, the informers its
// controllers were given (informers.PieceFactory.Census): which
// controllers read which cache, typed or metadata, from where, and
// whether it has synced.
const InformersPath = "/debug/fleet/informers"

// InformersHandler serves InformersPath.
func (r *Runtime) InformersHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(r.Census()); err != nil {
			klog.FromContext(req.Context()).Error(err, "Writing the informer census")
		}
	})
}

// Census lists, per piece running here ("partition" for the partition
// controllers), the informers its controllers were given.
func (r *Runtime) Census() map[string][]informers.InformerRecord {
	out := map[string][]informers.InformerRecord{}
	r.factories.Range(func(key, value any) bool {
		out[key.(string)] = value.(*informers.PieceFactory).Census()
		return true
	})
	return out
}
