package informers

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"k8s.io/component-base/metrics/testutil"
	"maps"
	"math/rand"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

var (
	ownedSimRuns = flag.Int("ownedsim.runs", 6, "number of random schedules of the owned cache simulation")
	ownedSimSeed = flag.Int64("ownedsim.seed", 0, "run only this seed of the owned cache simulation")
	// ownedSimUngated plants the bug the simulation exists for: the
	// controllers see a namespace before the owned cache holds it.
	ownedSimUngated = flag.Bool("ownedsim.ungated", false, "plant a bug: do not gate namespaces on the owned cache")
	ownedSimPlant   = flag.String("ownedsim.plant", "", "plant a rule of keeping by partition out: informer-names, no-note, no-read-after-list, gain-shows-while-listing, ready-by-partition-only, relist-reads-namespaces, hold-keeps-selector, let-go-from-informer, let-go-while-listing, reveal-from-store, take-from-trunk or keeps-later-naming")
	// ownedSimListsCreated sends every new namespace of a selected watch
	// down the path of one met in a relist: the cache is given no
	// Creations, so none is taken from its creation and each joins
	// through a list.
	ownedSimListsCreated = flag.Bool("ownedsim.lists-created", false, "give the cache no Creations: every new namespace of a selected watch joins through a list")
	// ownedSimSelected makes every schedule select the ConfigMaps' watch
	// (and list by shard selectors), for sweeps of that path.
	ownedSimSelected = flag.Bool("ownedsim.selected", false, "every schedule lists by shard selectors and selects the ConfigMaps' watch")
	// ownedSimStormy expires the sources' versions far more often, and
	// right after lists, where a relist meets a gain's hand-over.
	ownedSimStormy = flag.Bool("ownedsim.stormy", false, "compact after one list in four, and turn the schedules' pauses into watch closes and compactions")
	ownedSimDebug  = flag.String("ownedsim.debug", "", "print the schedule and every event of this namespace (*: of every namespace)")
)

// simDebugf prints a line of the schedule when -ownedsim.debug is set,
// and only of namespace ns when ns is not "".
func simDebugf(ns string, format string, args ...any) {
	if *ownedSimDebug == "" || ns != "" && *ownedSimDebug != "*" && ns != *ownedSimDebug {
		return
	}
	fmt.Printf(time.Now().Format("15:04:05.000")+" "+format+"\n", args...)
}

// simPartitions: namespaces are placed in this many partitions.
const simPartitions = 4

// simWaitMax bounds every wait of a schedule on the owned cache (a gain,
// a hold of every namespace, the first sync): far beyond what one takes
// (a watch resuming waits at most 16 s), so one that has not returned by
// then never will, and the schedule fails with what the cache waits for
// instead of blocking the run until the test binary's timeout.
const simWaitMax = 60 * time.Second

// simStuck fails a schedule whose wait for what did not return within
// simWaitMax, with what the owned cache waits for.
func simStuck(t *testing.T, seed int64, what string, owned *OwnedCache) {
	t.Helper()
	var waits []string
	for _, w := range owned.Waiting() {
		waits = append(waits, w.String())
	}
	t.Errorf("seed %d: %s did not return within %s; the owned cache waits for: %s", seed, what, simWaitMax, strings.Join(waits, " | "))
}

// TestOwnedCacheSimulation drives the owned cache, its scope and a
// controller written like the root-CA publisher against an in-memory
// apiserver (apiServerModel) under a seeded random schedule of
// namespaces created and deleted, ConfigMaps created, updated and
// deleted (the publisher's own among them, the moment it appears),
// partitions gained and lost, watches ended early and history
// compacted (every watch resumes into 410 Gone and relists), and a
// singleton holding every namespace and letting go. At each quiescent
// point:
//
//   - the informer holds exactly the model's ConfigMaps of the loaded
//     partitions' namespaces (of every namespace while held everywhere),
//     at the model's versions;
//   - every handler's view (what its notifications left it knowing)
//     equals the scope's: nothing the apiserver deleted is kept, nothing
//     visible is missing;
//   - no handler was told of an update or deletion of an object it did
//     not know, nor of an object older than one it knew;
//   - the publisher's ConfigMap exists in every namespace it sees.
//
// A failure prints its seed; -ownedsim.seed replays the schedule (the
// goroutines' interleaving is the machine's), -ownedsim.ungated plants
// the namespace-gate bug.
func TestOwnedCacheSimulation(t *testing.T) {
	plantRule(t, *ownedSimPlant)
	seeds := []int64{}
	if *ownedSimSeed != 0 {
		seeds = append(seeds, *ownedSimSeed)
	} else {
		base := time.Now().UnixNano()
		for i := range *ownedSimRuns {
			seeds = append(seeds, base+int64(i))
		}
	}
	// A schedule mostly waits (watches resuming, quiescence): they run
	// at once, -parallel at a time.
	var mu sync.Mutex
	totals := map[string]int{}
	t.Run("schedules", func(t *testing.T) {
		for _, seed := range seeds {
			t.Run(strconv.FormatInt(seed, 10), func(t *testing.T) {
				t.Parallel()
				counts := runOwnedSim(t, seed)
				if t.Failed() {
					t.Fatalf("seed %d failed: replay with -ownedsim.seed=%d", seed, seed)
				}
				mu.Lock()
				defer mu.Unlock()
				for k, v := range counts {
					totals[k] += v
				}
			})
		}
	})
	var keys []string
	for k := range totals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var summary []string
	for _, k := range keys {
		summary = append(summary, fmt.Sprintf("%s %d", k, totals[k]))
	}
	t.Logf("%d schedules: %s", len(seeds), strings.Join(summary, ", "))
}

// simHandler checks the notifications one handler receives: as from an
// upstream informer, never an update or deletion of an object it was
// not told of, never an addition of one it knows, never an older version
// after a newer one.
type simHandler struct {
	mu         sync.Mutex
	known      map[string]string // key -> version
	violations []string
}

func (h *simHandler) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { h.note("add", obj, true) },
		UpdateFunc: func(_, obj any) { h.note("update", obj, true) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				h.note("tombstone", d.Obj, false)
				return
			}
			h.note("delete", obj, false)
		},
	}
}

func (h *simHandler) note(what string, obj any, live bool) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	key := m.GetNamespace() + "/" + m.GetName()
	simDebugf(m.GetNamespace(), "handler told %s of %s at %s", what, key, m.GetResourceVersion())
	h.mu.Lock()
	defer h.mu.Unlock()
	known, ok := h.known[key]
	switch {
	case what == "add" && ok:
		h.violations = append(h.violations, fmt.Sprintf("addition of %s at %s, known at %s", key, m.GetResourceVersion(), known))
	case what != "add" && !ok:
		h.violations = append(h.violations, fmt.Sprintf("%s of %s at %s, never added", what, key, m.GetResourceVersion()))
	case what == "update" && newerVersion(known, m.GetResourceVersion()):
		h.violations = append(h.violations, fmt.Sprintf("update of %s to %s after %s", key, m.GetResourceVersion(), known))
	}
	if live {
		h.known[key] = m.GetResourceVersion()
	} else {
		delete(h.known, key)
	}
}

// simPublisher writes the ConfigMap "root" into every namespace it sees,
// and again when it sees it deleted, reading its listers as the root-CA
// publisher does.
type simPublisher struct {
	model      *apiServerModel
	namespaces cache.SharedIndexInformer
	configMaps cache.SharedIndexInformer
	queue      chan string
}

func (p *simPublisher) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ns := <-p.queue:
			_, nsExists, _ := p.namespaces.GetIndexer().GetByKey(ns)
			_, cmExists, _ := p.configMaps.GetIndexer().GetByKey(ns + "/root")
			simDebugf(ns, "publisher reads %s: namespace %v, ConfigMap %v", ns, nsExists, cmExists)
			if nsExists && !cmExists {
				p.model.writeConfigMap(ns, "root", false)
			}
		}
	}
}

func (p *simPublisher) enqueue(ns string) {
	select {
	case p.queue <- ns:
	default:
		go func() { p.queue <- ns }()
	}
}

func runOwnedSim(t *testing.T, seed int64) map[string]int {
	rnd := rand.New(rand.NewSource(seed))
	model := newAPIServerModel()
	model.listLatency = time.Duration(rnd.Intn(150)) * time.Millisecond
	// Drawn from a source of its own, as selected below.
	if late := rand.New(rand.NewSource(seed ^ 0x1a7e)); late.Intn(2) == 0 {
		model.namespaceLatency = time.Duration(late.Intn(400)) * time.Millisecond
	}
	if *ownedSimStormy {
		storm := rand.New(rand.NewSource(seed ^ 0x5702))
		var stormMu sync.Mutex
		model.compactAfterList = func() bool {
			stormMu.Lock()
			defer stormMu.Unlock()
			return storm.Intn(4) == 0
		}
	}
	defer model.close()
	// Namespaces that exist before the replica starts, each with an
	// object, as a replica joining a running cluster finds them; drawn
	// apart and named apart from the schedule's, so that earlier seeds
	// keep their schedules.
	existing := rand.New(rand.NewSource(seed ^ 0xe715)).Intn(4)
	for i := range existing {
		ns := fmt.Sprintf("old-%d", i)
		model.createNamespace(ns)
		model.writeConfigMap(ns, "cm-0", false)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	config := &rest.Config{Host: model.server.URL, QPS: -1}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	partitionOf := func(ns string) int {
		h := fnv.New32a()
		_, _ = h.Write([]byte(ns))
		return int(h.Sum32() % simPartitions)
	}
	pool, namespaces, mapper := startModelPool(ctx, t, client)
	sharded := rnd.Intn(2) == 0 || *ownedSimSelected
	// selected: the ConfigMaps' watch names the loaded namespaces in a
	// shard selector, as the Pods' does under sharded-watch. Drawn from
	// a source of its own, so that the seeds' schedules stay what they
	// were before it was drawn.
	var selected sets.Set[string]
	if sharded && (rand.New(rand.NewSource(seed^0x5e1ec7)).Intn(2) == 0 || *ownedSimSelected) {
		selected = sets.New("configmaps")
	}
	creations := pool.creations
	if *ownedSimListsCreated {
		creations = nil
	}
	owned, err := NewOwnedCache(OwnedCacheConfig{Sharded: sharded, MaxTerms: 2, NamespaceWatchMax: rnd.Intn(3), RESTClients: NewRESTClients(config), Mapper: mapper, Namespaces: namespaces, Creations: creations, PartitionOf: partitionOf, Partitions: simPartitions, SelectedWatches: selected})
	if err != nil {
		t.Fatal(err)
	}
	scope := NewScope(simPartitions, partitionOf)
	if !*ownedSimUngated {
		scope.GateNamespaces()
		owned.ReportTo(scope)
	}
	// The first partitions come with the informers' first list. A
	// replica that starts includes them before its controllers make any
	// informer of the owned cache; drawn apart, so that earlier seeds
	// keep their schedules.
	loaded := map[int]bool{0: true, 1: true}
	includeFirstPartitions := func() {
		for p := range loaded {
			if err := owned.Include(ctx, p); err != nil {
				t.Fatal(err)
			}
			scope.Gain(p)
		}
	}
	includeFirst := rand.New(rand.NewSource(seed^0x1c1d)).Intn(2) == 0
	if includeFirst {
		includeFirstPartitions()
	}
	factory, err := NewPieceFactory(PieceConfig{Shared: pool, SharedStop: ctx.Done(), Owned: owned, Mapper: mapper, Scopes: MapperScopes{mapper}, Scope: scope})
	if err != nil {
		t.Fatal(err)
	}
	cmInformer := factory.Core().V1().ConfigMaps().Informer()
	nsInformer := factory.Core().V1().Namespaces().Informer()
	checker := &simHandler{known: map[string]string{}}
	if _, err := cmInformer.AddEventHandler(checker.handler()); err != nil {
		t.Fatal(err)
	}
	publisher := &simPublisher{model: model, namespaces: nsInformer, configMaps: cmInformer, queue: make(chan string, 1000)}
	if _, err := nsInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) { publisher.enqueue(obj.(*corev1.Namespace).Name) }}); err != nil {
		t.Fatal(err)
	}
	if _, err := cmInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		key, _ := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if ns, name, _ := cache.SplitMetaNamespaceKey(key); name == "root" {
			publisher.enqueue(ns)
		}
	}}); err != nil {
		t.Fatal(err)
	}
	if !includeFirst {
		includeFirstPartitions()
	}
	factory.Start(ctx.Done())
	owned.Start(ctx.Done())
	syncCtx, cancelSync := context.WithTimeout(ctx, simWaitMax)
	defer cancelSync()
	for typ, synced := range factory.WaitForCacheSync(syncCtx.Done()) {
		if !synced {
			simStuck(t, seed, fmt.Sprintf("the first sync of the %v informer", typ), owned)
			return nil
		}
	}
	go publisher.run(ctx)

	counts := map[string]int{}
	if includeFirst {
		counts["schedules including partitions before any informer"]++
	}
	counts["namespaces existing before the start"] += existing
	if selected != nil {
		counts["schedules with a selected watch"]++
	}
	takenBefore := takenFromCreation(t)
	// rootDeleted: when each namespace's publisher's ConfigMap was
	// deleted the moment it appeared.
	var rootDeleted sync.Map
	gaining := map[int]chan struct{}{}
	// everywhere: a singleton holds every namespace (HoldEverywhere), as
	// the replica running pod-garbage-collector does with Pods; its
	// authority running out lets go of them with the partitions.
	everywhere := false
	var live []string
	next := 0
	// A second controller's handler joins the running informer at the
	// start of a round (drawn apart, so earlier seeds keep their
	// schedules): it is told the visible objects in order with the
	// events and changes of scope around it.
	checkers := []*simHandler{checker}
	lateRound := 1 + rand.New(rand.NewSource(seed^0x1a7e)).Intn(3)
	for round := range 4 {
		if round == lateRound {
			late := &simHandler{known: map[string]string{}}
			if _, err := cmInformer.AddEventHandler(late.handler()); err != nil {
				t.Fatal(err)
			}
			checkers = append(checkers, late)
			counts["handlers added to a running informer"]++
		}
		for range 40 + rnd.Intn(40) {
			switch op := rnd.Intn(100); {
			case op < 20:
				ns := fmt.Sprintf("ns-%d", next)
				next++
				model.createNamespace(ns)
				live = append(live, ns)
				counts["namespaces created"]++
				if rnd.Intn(2) == 0 {
					// A tenant's objects in the namespace's first moments,
					// while it joins the cache.
					pauses := []time.Duration{time.Duration(rnd.Intn(250)) * time.Millisecond, time.Duration(rnd.Intn(250)) * time.Millisecond}
					remove := rnd.Intn(3) == 0
					go func() {
						model.writeConfigMap(ns, "first", false)
						time.Sleep(pauses[0])
						model.writeConfigMap(ns, "first", true)
						time.Sleep(pauses[1])
						if remove {
							model.deleteConfigMap(ns, "first")
						} else {
							model.writeConfigMap(ns, "first", true)
						}
					}()
					counts["namespaces written in their first moments"]++
				}
				if rnd.Intn(2) == 0 {
					// The publisher's ConfigMap deleted the moment it
					// appears, as upstream's conformance test does.
					go func() {
						_ = wait.PollUntilContextTimeout(ctx, time.Millisecond, 2*time.Second, true, func(context.Context) (bool, error) {
							version := model.deleteConfigMap(ns, "root")
							if version == 0 {
								return false, nil
							}
							rootDeleted.Store(ns, version)
							return true, nil
						})
					}()
					counts["publisher's ConfigMap deleted as it appeared"]++
				}
			case op < 25 && len(live) > 0:
				i := rnd.Intn(len(live))
				model.deleteNamespace(live[i])
				live = append(live[:i], live[i+1:]...)
				counts["namespaces deleted"]++
			case op < 70 && len(live) > 0:
				ns := live[rnd.Intn(len(live))]
				name := fmt.Sprintf("cm-%d", rnd.Intn(4))
				switch {
				case model.writeConfigMap(ns, name, false):
					counts["ConfigMaps created"]++
				case rnd.Intn(3) == 0 && model.deleteConfigMap(ns, name) != 0:
					counts["ConfigMaps deleted"]++
				case model.writeConfigMap(ns, name, true):
					counts["ConfigMaps updated"]++
				}
			case op < 80:
				p := rnd.Intn(simPartitions)
				simDebugf("", "partition %d moves (loaded: %v)", p, loaded[p])
				if gaining[p] != nil {
					// The partition table serializes a partition's moves.
					select {
					case <-gaining[p]:
					case <-time.After(simWaitMax):
						simStuck(t, seed, fmt.Sprintf("round %d: the gain of partition %d", round, p), owned)
						return counts
					}
					delete(gaining, p)
				}
				if loaded[p] {
					scope.Lose(p)
					owned.Unload(p)
					delete(loaded, p)
					counts["partitions lost"]++
				} else {
					loaded[p] = true
					done := make(chan struct{})
					gaining[p] = done
					go func() {
						defer close(done)
						// Gained as the partition table does: loaded, then
						// in scope.
						if owned.Load(ctx, p) == nil {
							simDebugf("", "partition %d loaded; in scope", p)
							scope.Gain(p)
						}
					}()
					counts["partitions gained"]++
				}
			case op < 86:
				simDebugf("", "watches end")
				model.closeWatches()
				counts["watches ended early"]++
			case op < 87:
				simDebugf("", "compaction")
				model.compact()
				counts["compactions"]++
			case op < 90:
				simDebugf("", "a singleton holds every namespace: %v", !everywhere)
				if everywhere {
					owned.ReleaseEverywhere(&corev1.ConfigMap{})
					counts["singletons let go of every namespace"]++
				} else {
					holdCtx, cancelHold := context.WithTimeout(ctx, simWaitMax)
					_, err := owned.HoldEverywhere(holdCtx, &corev1.ConfigMap{})
					cancelHold()
					if err != nil {
						simStuck(t, seed, fmt.Sprintf("round %d: holding every namespace", round), owned)
						return counts
					}
					counts["singletons held every namespace"]++
				}
				everywhere = !everywhere
			case *ownedSimStormy && op < 95:
				simDebugf("", "watches end")
				model.closeWatches()
				counts["watches ended early"]++
			case *ownedSimStormy:
				simDebugf("", "compaction")
				model.compact()
				counts["compactions"]++
			default:
				time.Sleep(time.Duration(rnd.Intn(300)) * time.Millisecond)
			}
			if rnd.Intn(4) == 0 {
				time.Sleep(time.Duration(rnd.Intn(30)) * time.Millisecond)
			}
		}
		// A deletion compacted away before a watch streamed it reaches
		// the informer folded into a relist, as a plain informer's would:
		// the publisher never hears of it, under KCM too.
		exempt := func(ns string) bool {
			version, ok := rootDeleted.Load(ns)
			return ok && model.wasFolded("configmaps", ns, version.(int64))
		}
		checkOwnedSim(ctx, t, seed, round, model, namespaces, scope, owned, checkers, loaded, everywhere, partitionOf, exempt)
		if t.Failed() {
			break
		}
	}
	counts["namespaces a selected watch took from their creation"] = takenFromCreation(t) - takenBefore
	rootDeleted.Range(func(key, value any) bool {
		if model.wasFolded("configmaps", key.(string), value.(int64)) {
			counts["publisher's ConfigMaps deleted and compacted away before a watch streamed it (not checked)"]++
		}
		return true
	})
	return counts
}

// checkOwnedSim waits for quiescence and checks the invariants.
func checkOwnedSim(ctx context.Context, t *testing.T, seed int64, round int, model *apiServerModel, namespaces cache.SharedIndexInformer, scope *Scope, owned *OwnedCache, checkers []*simHandler, loaded map[int]bool, everywhere bool, partitionOf func(string) int, exempt func(namespace string) bool) {
	t.Helper()
	// The Namespaces informer is a plain one: after watches ended again
	// and again its reflector backs off, up to 30 s.
	var why string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		got := map[string]bool{}
		for _, key := range namespaces.GetStore().ListKeys() {
			got[key] = true
		}
		for _, ns := range model.namespaceNames() {
			if !got[ns] {
				why = fmt.Sprintf("namespace %s not in the Namespaces informer (at version %s; the apiserver's counts: %v)", ns, namespaces.LastSyncResourceVersion(), model.countsNow())
				return false, nil
			}
			delete(got, ns)
		}
		for ns := range got {
			why = "deleted namespace " + ns + " in the Namespaces informer"
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("seed %d, round %d: not quiescent: %s", seed, round, why)
		return
	}
	// differing: the namespaces whose objects the store last differed in.
	var differing []string
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		why = ""
		differing = nil
		want := map[string]string{}
		visible := map[string]string{}
		weights := map[int]uint64{}
		for p := range loaded {
			weights[p] = 0
		}
		nsWeights := map[string]uint64{}
		for key, version := range model.configMapVersions() {
			ns, _, _ := cache.SplitMetaNamespaceKey(key)
			if loaded[partitionOf(ns)] {
				weights[partitionOf(ns)]++
				nsWeights[ns]++
				if scope.HasNamespace(ns) {
					visible[key] = version
				}
			}
			if loaded[partitionOf(ns)] || everywhere {
				want[key] = version
			}
		}
		got := map[string]string{}
		// The owned cache's own informer: the controllers' is scoped.
		for _, obj := range owned.InformerFor(&corev1.ConfigMap{}).GetStore().List() {
			m, _ := meta.Accessor(obj)
			got[m.GetNamespace()+"/"+m.GetName()] = m.GetResourceVersion()
		}
		if d := diffVersions(got, want); d != "" {
			why = "the informer's store against the model: " + d
			differing = namespacesDiffering(got, want)
			return false, nil
		}
		if got := owned.PartitionObjects(); !maps.Equal(got, weights) {
			why = fmt.Sprintf("the partitions' weights are %v, want %v", got, weights)
			return false, nil
		}
		gotItems := map[string]uint64{}
		for ns, items := range owned.NamespaceItems(&corev1.ConfigMap{}, slices.Collect(maps.Keys(nsWeights))) {
			gotItems[ns] = uint64(len(items))
		}
		if !maps.Equal(gotItems, nsWeights) {
			why = fmt.Sprintf("the namespaces' ConfigMaps are %v, want %v", gotItems, nsWeights)
			return false, nil
		}
		for i, checker := range checkers {
			checker.mu.Lock()
			d := diffVersions(checker.known, visible)
			checker.mu.Unlock()
			if d != "" {
				why = fmt.Sprintf("handler %d's view against the scope's: %s", i, d)
				return false, nil
			}
		}
		for p := range loaded {
			if !scope.Owns(p) {
				why = fmt.Sprintf("partition %d not gained yet", p)
				return false, nil
			}
		}
		// Every namespace of a loaded partition is shown in the end: a
		// namespace never held is one the partition controllers never
		// serve.
		for _, ns := range model.namespaceNames() {
			if loaded[partitionOf(ns)] && !scope.HasNamespace(ns) {
				why = fmt.Sprintf("namespace %s of loaded partition %d not shown", ns, partitionOf(ns))
				return false, nil
			}
		}
		for key := range visible {
			ns, _, _ := cache.SplitMetaNamespaceKey(key)
			if _, ok := visible[ns+"/root"]; !ok && model.hasNamespace(ns) && !exempt(ns) {
				why = fmt.Sprintf("no publisher's ConfigMap in namespace %s (partition %d)", ns, partitionOf(ns))
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		var waits []string
		for _, w := range owned.Waiting() {
			waits = append(waits, w.String())
		}
		t.Errorf("seed %d, round %d: not quiescent: %s (the owned cache waits for: %s)", seed, round, why, strings.Join(waits, " | "))
		for _, ns := range differing {
			t.Errorf("seed %d, round %d: %s: %s", seed, round, ns, owned.namespaceState(&corev1.ConfigMap{}, ns))
		}
	}
	for i, checker := range checkers {
		checker.mu.Lock()
		for _, v := range checker.violations {
			t.Errorf("seed %d, round %d: handler %d was told %s", seed, round, i, v)
		}
		checker.violations = nil
		checker.mu.Unlock()
	}
}

// namespacesDiffering lists the namespaces of the keys whose versions
// differ between got and want, at most three.
func namespacesDiffering(got, want map[string]string) []string {
	seen := map[string]bool{}
	for _, m := range []map[string]string{got, want} {
		for key := range m {
			if got[key] != want[key] {
				ns, _, _ := cache.SplitMetaNamespaceKey(key)
				seen[ns] = true
			}
		}
	}
	out := slices.Sorted(maps.Keys(seen))
	return out[:min(len(out), 3)]
}

// diffVersions says how got differs from want ("" if not).
func diffVersions(got, want map[string]string) string {
	var out []string
	for key, version := range want {
		if got[key] != version {
			out = append(out, fmt.Sprintf("%s at %q, want %q", key, got[key], version))
		}
	}
	for key, version := range got {
		if _, ok := want[key]; !ok {
			out = append(out, fmt.Sprintf("%s at %q, deleted", key, version))
		}
	}
	sort.Strings(out)
	if len(out) > 5 {
		out = append(out[:5], fmt.Sprintf("and %d more", len(out)-5))
	}
	return strings.Join(out, "; ")
}

// takenFromCreation is how many namespaces the ConfigMaps' selected
// watch has taken from their creation version in this process.
func takenFromCreation(t *testing.T) int {
	v, err := testutil.GetCounterMetricValue(namespacesTakenFromCreation.WithLabelValues("configmaps"))
	if err != nil {
		t.Fatal(err)
	}
	return int(v)
}

// plantRule plants one rule of keeping by partition out for this run
// (-ownedsim.plant), so that a sweep shows a schedule that breaks
// without it.
func plantRule(t *testing.T, rule string) {
	plants := map[string]*bool{
		"informer-names":           &plantedGainNamesFromInformer,
		"no-note":                  &plantedNoNote,
		"no-read-after-list":       &plantedNoReadAfterList,
		"gain-shows-while-listing": &plantedGainShowsWhileListing,
		"ready-by-partition-only":  &plantedReadyByPartitionOnly,
		"relist-reads-namespaces":  &plantedRelistReadsNamespaces,
		"hold-keeps-selector":      &plantedHoldKeepsSelector,
		"let-go-from-informer":     &plantedLetGoFromInformer,
		"let-go-while-listing":     &plantedLetGoInsertsWhileListing,
		"reveal-from-store":        &plantedRevealFromStore,
		"take-from-trunk":          &plantedTakeFromTrunk,
		"keeps-later-naming":       &plantedKeepsLaterNaming,
		"settle-loaded-only":       &plantedSettleLoadedOnly,
	}
	if rule == "" {
		return
	}
	planted, ok := plants[rule]
	if !ok {
		t.Fatalf("-ownedsim.plant=%q: not a rule (%v)", rule, slices.Sorted(maps.Keys(plants)))
	}
	*planted = true
	t.Cleanup(func() { *planted = false })
}
