package controllers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"

	"github.com/fleet-controller-manager/fleet-controller-manager/informers"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// runPartitionPiece runs a partition piece with controllers of its own, in
// the informer modes that give each piece its own watches
// (namespace-watch, sharded-watch). It returns once the piece's write
// fence is closed and the writes already sent are answered; the
// controllers, every write refused, may still be winding down (upstream
// controllers make some calls with context.TODO()). They release the
// piece's informers when they return, and a new instance of the same
// partition on this replica waits for them.
func (r *Runtime) runPartitionPiece(ctx context.Context, piece shard.Piece) error {
	p := piece.Partition()
	if !r.waitDrained(ctx, p) {
		return nil
	}
	cc, shutdown, err := r.partitionPieceContext(piece)
	if err != nil {
		return err
	}
	built, err := r.buildPartitionControllers(ctx, cc)
	if err != nil {
		shutdown()
		return fmt.Errorf("building controllers of %s: %w", piece, err)
	}
	r.partitions.Open(p)
	startInformers(ctx, cc, "partition")
	klog.InfoS("Piece controllers running", "piece", piece, "controllers", len(built))
	done := make(chan struct{})
	go func() {
		defer close(done)
		kcmapp.RunControllers(ctx, cc, built, kcmapp.ControllerStartJitter, 0)
	}()
	<-ctx.Done()
	stopping := time.Now()
	// No timeout: a write in flight is answered or fails; until then the
	// piece has not stopped.
	if err := r.partitions.Close(context.Background(), p); err != nil {
		return err
	}
	r.setDraining(p, done)
	go func() {
		<-done
		shutdown()
		r.clearDraining(p, done)
		klog.V(2).InfoS("Controllers of a released partition returned", "piece", piece, "after", time.Since(stopping).Round(time.Millisecond))
	}()
	return nil
}

// partitionPieceContext gives a partition piece its own informers of
// namespaced kinds, by the replica's informer mode.
func (r *Runtime) partitionPieceContext(piece shard.Piece) (kcmapp.ControllerContext, func(), error) {
	p := piece.Partition()
	cc := r.controllerContext(r.partitionBuilder)
	pc := informers.PieceConfig{
		Mode: r.mode, Client: r.plainClient, RESTClients: r.restClients,
		Shared: r.shared, SharedStop: r.sharedStop, Mapper: r.restMapper,
		InPiece: func(ns string) bool { return r.ring.NamespacePartition(ns) == p },
		Resync:  cc.ResyncPeriod(), Transform: trimManagedFields,
	}
	if r.mode == informers.ModeShardedWatch {
		sharded, err := kubernetes.NewForConfig(informers.ShardedConfig(r.informerConfig, shard.ShardSelector(p, r.ring.Partitions)))
		if err != nil {
			return cc, nil, fmt.Errorf("sharded client of %s: %w", piece, err)
		}
		pc.ShardedClient = sharded
	}
	factory, err := informers.NewPieceFactory(pc)
	if err != nil {
		return cc, nil, fmt.Errorf("informers of %s: %w", piece, err)
	}
	metadataFactory := metadatainformer.NewFilteredSharedInformerFactory(r.metadataClient, cc.ResyncPeriod(), "", nil)
	cc.InformerFactory = factory
	cc.ObjectOrMetadataInformerFactory = informerfactory.NewInformerFactory(factory, metadataFactory)
	return cc, func() { factory.Shutdown(); metadataFactory.Shutdown() }, nil
}

// waitDrained waits for the controllers of a previous instance of
// partition p on this replica to return; false if ctx ended first.
func (r *Runtime) waitDrained(ctx context.Context, p int) bool {
	r.drainingMu.Lock()
	ch := r.draining[p]
	r.drainingMu.Unlock()
	if ch == nil {
		return true
	}
	klog.InfoS("Waiting for the previous instance of the partition to return", "partition", p)
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

func (r *Runtime) setDraining(p int, ch chan struct{}) {
	r.drainingMu.Lock()
	defer r.drainingMu.Unlock()
	r.draining[p] = ch
}

func (r *Runtime) clearDraining(p int, ch chan struct{}) {
	r.drainingMu.Lock()
	defer r.drainingMu.Unlock()
	if r.draining[p] == ch {
		delete(r.draining, p)
	}
}
