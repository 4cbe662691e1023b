package controllers

import (
	"context"
	"fmt"
	"sort"
	"time"

	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"

	"github.com/fleet-controller-manager/fleet-controller-manager/informers"
)

// startPartitionControllers builds the partition controllers and starts
// them with gained in scope. They run on the replica's context: a
// partition that moves away only leaves their scope. Their informers'
// first lists bring the objects of the partitions in scope.
func (r *Runtime) startPartitionControllers(gainCtx context.Context, gained []int) error {
	ctx := klog.NewContext(r.ctx, withoutReregistrationErrors(klog.FromContext(r.ctx)))
	cc := r.controllerContext(r.partitionBuilder)
	if r.replicas != nil {
		n := r.replicas()
		cc.ComponentConfig = shareWorkers(cc.ComponentConfig, n)
		klog.FromContext(ctx).Info("Partition controllers' workers shared among the fleet's replicas", "replicas", n, "deploymentWorkers", cc.ComponentConfig.DeploymentController.ConcurrentDeploymentSyncs)
	}
	factory, err := informers.NewPieceFactory(informers.PieceConfig{
		Shared: r.shared, SharedStop: r.sharedStop, Owned: r.owned,
		Mapper: r.restMapper, Scopes: r.kindScopes, Scope: r.table.scope, Logger: klog.FromContext(ctx),
	})
	if err != nil {
		return fmt.Errorf("informers of the partition controllers: %w", err)
	}
	cc.InformerFactory = factory
	cc.ObjectOrMetadataInformerFactory = informerfactory.NewInformerFactory(factory, factory.Metadata())
	built, err := r.buildPartitionControllers(ctx, cc, factory)
	if err != nil {
		factory.Shutdown()
		return fmt.Errorf("building the partition controllers: %w", err)
	}
	startInformers(ctx, cc, "partition")
	r.factories.Store("partition", factory)
	klog.FromContext(gainCtx).Info("Partition controllers running", "controllers", len(built), "partitions", gained)
	go logGainedOnSync(ctx, factory, gained, time.Now())
	go func() {
		kcmapp.RunControllers(ctx, cc, built, kcmapp.ControllerStartJitter, 0)
		factory.Shutdown()
	}()
	return nil
}

// logGainedOnSync logs the gain of the partitions the controllers started
// with once their informers' first lists are cached, which is when the
// controllers act on them (a later gain logs once it has delivered).
func logGainedOnSync(ctx context.Context, factory *informers.PieceFactory, batch []int, start time.Time) {
	for _, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return
		}
	}
	for _, p := range batch {
		klog.FromContext(ctx).V(2).Info("Partition gained", "partition", p, "took", time.Since(start).Round(time.Millisecond), "with", "the informers' first lists")
	}
}

// partitionControllers are the partition controllers the flags enable,
// but for the token controller, which KCM builds by hand
// (newTokensController).
func (r *Runtime) partitionControllers() map[string]*kcmapp.ControllerDescriptor {
	descriptors := map[string]*kcmapp.ControllerDescriptor{}
	for name, e := range Catalog {
		if e.Kind == Partition && name != names.ServiceAccountTokenController {
			descriptors[name] = r.descriptors[name]
		}
	}
	return descriptors
}

// buildPartitionControllers builds the partition controllers on cc, the
// token controller first, as KCM starts it. They are built one at a time,
// so that factory's census says which controller asked for which
// informer.
func (r *Runtime) buildPartitionControllers(ctx context.Context, cc kcmapp.ControllerContext, factory *informers.PieceFactory) ([]kcmapp.Controller, error) {
	defer factory.Building("")
	var built []kcmapp.Controller
	if r.enabled(names.ServiceAccountTokenController) {
		factory.Building(names.ServiceAccountTokenController)
		tokens, err := r.newTokensController(ctx, cc)
		if err != nil {
			return nil, err
		}
		built = append(built, tokens)
	}
	descriptors := r.partitionControllers()
	order := make([]string, 0, len(descriptors))
	for name := range descriptors {
		order = append(order, name)
	}
	sort.Strings(order)
	for _, name := range order {
		factory.Building(name)
		one, err := kcmapp.BuildControllers(ctx, cc, map[string]*kcmapp.ControllerDescriptor{name: descriptors[name]}, nil, ignoreHealthChecks{})
		if err != nil {
			return nil, err
		}
		built = append(built, one...)
	}
	return built, nil
}
