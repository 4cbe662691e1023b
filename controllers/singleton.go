package controllers

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	clientinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"

	"github.com/fleet-controller-manager/fleet-controller-manager/informers"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// singletonRuns are the singleton pieces that run on this replica, each
// with the write gate of its run.
type singletonRuns struct {
	mu   sync.Mutex
	runs map[shard.Piece]*singletonRun
}

type singletonRun struct {
	cancel context.CancelFunc
	gate   *writeGate
}

func (s *singletonRuns) add(piece shard.Piece, run *singletonRun) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs == nil {
		s.runs = map[shard.Piece]*singletonRun{}
	}
	s.runs[piece] = run
}

// stop shuts the gate of piece's run at once (with the report tail when
// it moves: writeGate) and cancels it.
func (s *singletonRuns) stop(piece shard.Piece, moved bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if run := s.runs[piece]; run != nil {
		tail := time.Duration(0)
		if moved {
			tail = reportTail
		}
		run.gate.Shut(tail)
		run.cancel()
	}
}

func (s *singletonRuns) remove(piece shard.Piece, run *singletonRun) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs[piece] == run {
		delete(s.runs, piece)
	}
}

// startSingleton runs a singleton piece until it is stopped, and reports
// it ended once it can no longer act: its clients write only while the
// run's gate is open, and the report waits for the writes already sent to
// be answered. An upstream controller's event broadcaster sends
// asynchronously and can outlive the controller, so an Event posted just
// after its run ended could be answered after another replica started the
// piece.
//
// It does not wait for the controller's goroutines to end, as a partition
// does not: the garbage collector takes over a second to return after its
// context ends, and every replica's gains under the view that moved it
// would wait for that (rule 1: a view is applied once what it takes away
// has stopped). The controller winds down on its own, its writes refused.
func (r *Runtime) startSingleton(piece shard.Piece) {
	ctx, cancel := context.WithCancel(r.ctx)
	ctx = klog.NewContext(ctx, withoutReregistrationErrors(klog.FromContext(ctx)))
	run := &singletonRun{cancel: cancel, gate: newWriteGate()}
	run.gate.Open()
	r.singletons.add(piece, run)
	go func() {
		defer cancel()
		err := r.runSingleton(ctx, piece, run.gate)
		if err == nil && ctx.Err() == nil {
			err = fmt.Errorf("the controllers of %s returned", piece)
		}
		run.gate.Shut(0) // a no-op after stop; no tail for a run that ended itself
		<-run.gate.Drained()
		r.singletons.remove(piece, run)
		if ctx.Err() != nil {
			err = nil // stopped
		}
		r.ended <- shard.Ended{Piece: piece, Err: err}
	}()
}

// runSingleton runs a singleton piece's controller on the replica's shared
// informers, its clients' writes through gate, until ctx ends or the
// controller returns. Its event handlers leave the shared informers with
// it.
func (r *Runtime) runSingleton(ctx context.Context, piece shard.Piece, gate *writeGate) error {
	held, err := r.holdEverywhere(ctx, piece.Name())
	if err != nil {
		return fmt.Errorf("informers of %s: %w", piece, err)
	}
	defer r.releaseEverywhere(held)
	factory, err := informers.NewPieceFactory(informers.PieceConfig{
		Shared: r.shared, SharedStop: r.sharedStop, PieceStop: ctx.Done(), Mapper: r.restMapper, Scopes: r.kindScopes, Held: held,
		Logger: klog.FromContext(ctx),
	})
	if err != nil {
		return fmt.Errorf("informers of %s: %w", piece, err)
	}
	defer factory.Shutdown()
	factory.Building(piece.Name())
	r.factories.Store(piece.Name(), factory)
	defer r.factories.Delete(piece.Name())
	cc := r.singletonContext(ctx, piece.Name(), r.singletonBuilder.forSingletonRun(gate, piece), factory, held)
	built, err := buildSingleton(ctx, cc, r.descriptors[piece.Name()])
	if err != nil {
		return fmt.Errorf("building controllers of %s: %w", piece, err)
	}
	defer r.registerDebug(built)()
	startInformers(ctx, cc, piece.Name())
	if len(built) == 0 {
		// As KCM: nothing to run still holds the piece until it moves.
		<-ctx.Done()
		return nil
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		kcmapp.RunControllers(ctx, cc, built, kcmapp.ControllerStartJitter, 0)
	}()
	select {
	case <-ended:
	case <-ctx.Done():
	}
	return nil
}

// singletonContext is the ControllerContext of singleton name, its
// informers from factory.
//
// With the owned cache, informers are typed only where a reader needs the
// objects or the replica holds them anyway: the kinds the colocated
// singletons read whole (colocatedTypedResources, and heldEverywhere),
// as in KCM's typed-first factory. Everything else
// the garbage collector and resourcequota watch is cached as metadata
// rather than in full, cluster-wide, in informers the two share. In
// filtered-watch the typed informers are cached anyway, and sharing them
// is what KCM does.
func (r *Runtime) singletonContext(ctx context.Context, name string, builder *sharedLimiterBuilder, factory *informers.PieceFactory, held map[reflect.Type]cache.SharedIndexInformer) kcmapp.ControllerContext {
	cc := r.controllerContext(builder)
	cc.InformerFactory = factory
	var typed clientinformers.SharedInformerFactory = factory
	if r.owned != nil {
		var needed []schema.GroupResource
		if Catalog[name].Has(NeedsMetadataInformers) {
			needed = append(needed, colocatedTypedResources...)
		}
		for _, kind := range heldEverywhere {
			if _, ok := held[reflect.TypeOf(kind.obj)]; ok {
				needed = append(needed, kind.resource)
			}
		}
		typed = factory.TypedWhereNeeded(needed...)
	}
	cc.ObjectOrMetadataInformerFactory = informerfactory.NewInformerFactory(typed, factory.Metadata())
	if name == names.ResourceQuotaController {
		cc.InformerFactory = quotaEvaluatorFactory{SharedInformerFactory: factory, monitors: cc.ObjectOrMetadataInformerFactory}
	}
	if name == names.GarbageCollectorController && cc.ComponentConfig.GarbageCollectorController.EnableGarbageCollector {
		// The garbage collector's own graph, as KCM builds it before the
		// controllers (ControllerContext.GraphBuilder).
		ignored := map[schema.GroupResource]struct{}{}
		for _, gr := range cc.ComponentConfig.GarbageCollectorController.GCIgnoredResources {
			ignored[schema.GroupResource{Group: gr.Group, Resource: gr.Resource}] = struct{}{}
		}
		cc.GraphBuilder = garbagecollector.NewDependencyGraphBuilder(ctx, r.metadataClient, r.restMapper, ignored, cc.ObjectOrMetadataInformerFactory, cc.InformersStarted)
	}
	return cc
}

// buildSingleton builds a singleton's controller as KCM's BuildControllers
// does, with the fleet's own constructor where it has one
// (fleetConstructors).
func buildSingleton(ctx context.Context, cc kcmapp.ControllerContext, descriptor *kcmapp.ControllerDescriptor) ([]kcmapp.Controller, error) {
	construct, ok := fleetConstructors[descriptor.Name()]
	if !ok {
		return kcmapp.BuildControllers(ctx, cc, map[string]*kcmapp.ControllerDescriptor{descriptor.Name(): descriptor}, nil, ignoreHealthChecks{})
	}
	logger := klog.FromContext(ctx)
	for _, gate := range descriptor.GetRequiredFeatureGates() {
		if !utilfeature.DefaultFeatureGate.Enabled(gate) {
			logger.Info("Controller is disabled by a feature gate", "controller", descriptor.Name(), "requiredFeatureGates", descriptor.GetRequiredFeatureGates())
			return nil, nil
		}
	}
	ctrl, err := construct(klog.NewContext(ctx, klog.LoggerWithName(logger, descriptor.Name())), cc, descriptor.Name())
	if err != nil || ctrl == nil {
		return nil, err
	}
	return []kcmapp.Controller{ctrl}, nil
}

// colocatedTypedResources are the namespaced resources, besides the kinds
// held everywhere, that the colocated singletons read whole from the
// pool: resourcequota's Service evaluator a Service's type and ports, its
// ResourceClaim evaluator a claim's device requests, the controller its
// own ResourceQuotas (its evaluators share that one informer,
// quotaEvaluatorFactory); node-lifecycle the node Leases; the
// resourceclaim controller its ResourceClaimTemplates. The garbage
// collector and resourcequota, which watch every resource, read them
// typed too: a metadata informer beside the typed one would watch the
// kind twice on their replica (TestInformersLikeKubeControllerManager).
var colocatedTypedResources = []schema.GroupResource{
	{Resource: "services"},
	{Resource: "resourcequotas"},
	{Group: "resource.k8s.io", Resource: "resourceclaims"},
	{Group: "resource.k8s.io", Resource: "resourceclaimtemplates"},
	{Group: "coordination.k8s.io", Resource: "leases"},
}

// quotaEvaluatorFactory is resourcequota's typed factory, whose
// ForResource gives its quota evaluators the informer its monitors watch:
// KCM's constructor builds the evaluators' listers from
// InformerFactory.ForResource and the monitors from
// ObjectOrMetadataInformerFactory.ForResource, the same typed informer
// there; here the monitors of ConfigMaps, Secrets and
// ReplicationControllers are metadata, and typed listers beside them would
// be second informers, made after the piece's informers start and never
// started, so a quota naming those resources would never be computed and
// every create it covers would be Forbidden. Their evaluators only count
// objects (generic.objectCountEvaluator: Usage ignores the object, no
// scope applies), so metadata gives the counts KCM computes.
type quotaEvaluatorFactory struct {
	clientinformers.SharedInformerFactory
	monitors informerfactory.InformerFactory
}

func (f quotaEvaluatorFactory) ForResource(gvr schema.GroupVersionResource) (clientinformers.GenericInformer, error) {
	return f.monitors.ForResource(gvr)
}
