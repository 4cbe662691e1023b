package informers

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
)

// load gains partitions: with await, it returns once every informer
// holds them.
func (o *OwnedCache) load(ctx context.Context, partitions []int, await bool) error {
	if err := o.waitNamespaces(ctx); err != nil {
		return err
	}
	g := o.beginGain(partitions)
	if len(g.adding) == 0 {
		return nil
	}
	defer func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.stopNaming(g) // if settleGain did not
	}()
	namespaces, err := o.gainedNamespaces(ctx, g)
	if err != nil {
		return fmt.Errorf("loading partitions %v: %w", partitions, err)
	}
	catchUps := o.keepGain(ctx, g, namespaces, await)
	ownedNamespaces.Add(float64(len(g.loading)))
	ownedPartitions.Add(float64(len(g.adding)))
	if err := o.awaitGain(ctx, g, catchUps, await); err != nil {
		return fmt.Errorf("loading partitions %v: %w", partitions, err)
	}
	arrived := o.settleGain(g)
	shown := append(g.loading, arrived...)
	if await && len(shown) > 0 {
		// Shown only while no trunk lists, which would fold their
		// events (doc.go, gain-shows-while-listing).
		err := heldPoll.DelayFunc().Until(ctx, true, false, func(context.Context) (bool, error) {
			return allHold(g.lws, shown, !plantedGainShowsWhileListing), nil
		})
		if err != nil {
			return fmt.Errorf("loading partitions %v: %w", partitions, err)
		}
	}
	// Included partitions are held from the informers' first list, which
	// their controllers wait for.
	o.markHeld(shown)
	return nil
}

// gain is one load of partitions in progress.
type gain struct {
	adding    map[int]bool
	informers []*ownedInformer
	lws       []*ownedListWatch
	tokens    []uint64 // each informer's naming token (ownedListWatch.nameGain)
	// started: the informers run, so the gain names its partitions
	// before reading their namespaces; naming until settled.
	started, naming bool
	loading         []string // the namespaces the gain lists and waits for
}

// beginGain marks the partitions not loaded yet loaded and, once the
// informers run, naming in every kind kept by partition.
func (o *OwnedCache) beginGain(partitions []int) *gain {
	o.mu.Lock()
	defer o.mu.Unlock()
	g := &gain{adding: map[int]bool{}, started: o.stop != nil}
	for _, p := range partitions {
		if !o.partitions[p] {
			o.partitions[p] = true
			g.adding[p] = true
		}
	}
	if len(g.adding) == 0 {
		return g
	}
	for _, i := range o.informers {
		g.informers = append(g.informers, i)
		g.lws = append(g.lws, i.lw)
		if g.started {
			g.tokens = append(g.tokens, i.lw.nameGain(g.adding))
		} else {
			g.tokens = append(g.tokens, math.MaxUint64)
		}
	}
	if g.started {
		g.naming = true
		for p := range g.adding {
			o.naming[p]++
		}
	}
	return g
}

// gainedNamespaces reads the namespaces of g's partitions: once the
// informers run, by a consistent list issued after they were named
// (doc.go, informer-names); before, from the Namespaces informer, as the
// informers' first lists read them again.
func (o *OwnedCache) gainedNamespaces(ctx context.Context, g *gain) ([]string, error) {
	if !g.started || plantedGainNamesFromInformer {
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.namespacesOf(g.adding), nil
	}
	names, err := o.readNamespaces(ctx)
	if err != nil {
		return nil, err
	}
	return o.inPartitions(names, g.adding), nil
}

// keepGain loads namespaces (and those each trunk noted while naming)
// into every informer and keeps g's partitions; it returns the catch-ups
// of the namespaces loaded already.
func (o *OwnedCache) keepGain(ctx context.Context, g *gain, namespaces []string, await bool) []func() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	var catchUps []func() error
	loading := sets.New[string]()
	for n, i := range g.informers {
		unlisted, loads := i.lw.keepGain(g.adding, namespaces, await, g.tokens[n])
		loading.Insert(loads...)
		if len(unlisted) > 0 && g.started {
			lw, synced := i.lw, i.informer.HasSynced
			catchUps = append(catchUps, func() error { return lw.catchUp(ctx, unlisted, synced) })
		}
	}
	g.loading = sets.List(loading)
	return catchUps
}

// awaitGain waits, with await, until every informer holds what the
// gain's lists handed over, and for the catch-ups.
func (o *OwnedCache) awaitGain(ctx context.Context, g *gain, catchUps []func() error, await bool) error {
	caughtUp := make(chan error, len(catchUps))
	for _, catchUp := range catchUps {
		go func() { caughtUp <- catchUp() }()
	}
	if await && plantedStuckLoad && slices.ContainsFunc(g.loading, func(ns string) bool { return strings.HasPrefix(ns, stuckLoadPrefix) }) {
		<-ctx.Done()
	}
	if await {
		if err := pollFast(ctx, func() bool { return allHold(g.lws, g.loading, false) }); err != nil {
			return err
		}
	}
	for range catchUps {
		if err := <-caughtUp; err != nil {
			return err
		}
	}
	return nil
}

// settleGain ends g's naming, and loads and returns the namespaces of its
// partitions the Namespaces informer shows that the gain did not load:
// created after its read, and left to it by join. Kinds kept by partition
// have kept them from their first event; the others list them now.
func (o *OwnedCache) settleGain(g *gain) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.stopNaming(g)
	if plantedSettleLoadedOnly {
		return nil
	}
	loading := sets.New(g.loading...)
	var arrived []string
	for _, ns := range o.namespacesOf(g.adding) {
		if !loading.Has(ns) {
			arrived = append(arrived, ns)
		}
	}
	for _, i := range g.informers {
		i.lw.load(arrived, true, nil)
	}
	return arrived
}

// stopNaming lets join take g's namespaces. Called with mu held.
func (o *OwnedCache) stopNaming(g *gain) {
	if !g.naming {
		return
	}
	g.naming = false
	for p := range g.adding {
		if o.naming[p]--; o.naming[p] <= 0 {
			delete(o.naming, p)
		}
	}
}

// readNamespaces reads every namespace's name by a consistent list,
// retrying until ctx ends.
func (o *OwnedCache) readNamespaces(ctx context.Context) ([]string, error) {
	var names []string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var err error
		if names, err = o.namespaceReads.get(ctx); err != nil {
			o.config.Logger.V(2).Info("Reading the namespaces of partitions gained; retrying", "err", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the namespaces of partitions gained: %w", err)
	}
	return names, nil
}

// gainEverywhere loads every partition into i's kind for a singleton
// (HoldEverywhere) as a gain does, and returns once i holds every
// namespace. Only the first hold catches up the namespaces loaded already
// (the replica's partitions'), whose source may be behind the server; a
// later one finds every namespace held and followed since.
func (o *OwnedCache) gainEverywhere(ctx context.Context, i *ownedInformer) error {
	o.mu.Lock()
	i.everywhere++
	first := i.everywhere == 1
	started := o.stop != nil
	every := map[int]bool{}
	for p := range o.config.Partitions {
		every[p] = true
	}
	if first {
		i.lw.holdEverywhere()
	}
	token := i.lw.nameGain(every)
	names := o.config.Namespaces.GetStore().ListKeys()
	o.mu.Unlock()
	if started {
		var err error
		if names, err = o.readNamespaces(ctx); err != nil {
			return err
		}
	}
	sort.Strings(names)
	o.mu.Lock()
	unlisted, loading := i.lw.keepGain(every, names, true, token)
	o.mu.Unlock()
	err := pollFast(ctx, func() bool { return i.lw.loadedInto(loading) })
	if err == nil && first && started && len(unlisted) > 0 {
		err = i.lw.catchUp(ctx, unlisted, i.informer.HasSynced)
	}
	return err
}
