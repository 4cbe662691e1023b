// Package controllers is the catalog of kube-controller-manager's
// controllers as the fleet runs them: for every upstream descriptor, whether
// it runs per namespace partition or as one singleton piece, what its
// ControllerContext must provide, and why. The descriptors themselves (names,
// aliases, constructors, feature gates, defaults) come from KCM's own
// NewControllerDescriptors; this package adds only the fleet's placement.
package controllers

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

// Kind is how a controller is placed on the fleet.
type Kind string

const (
	// Partition controllers serve namespace partitions: each replica runs
	// one instance of each, which sees only the namespaces of the
	// partitions the replica owns now. Every write they make is into a
	// namespace, so the partition write fence can refuse it once the
	// namespace's partition has moved.
	Partition Kind = "partition"
	// Singleton controllers run once in the fleet, on one replica, with a
	// cluster-wide view.
	Singleton Kind = "singleton"
)

// Need is something a controller's ControllerContext must provide beyond
// the piece's informer factory and clients.
type Need string

const (
	// NeedsNodes: reads Nodes (from the replica's shared cluster-scoped
	// informers; lookups only).
	NeedsNodes Need = "nodes"
	// NeedsNamespaces: drives writes from the Namespaces informer, so a
	// partition piece must see only its own namespaces there.
	NeedsNamespaces Need = "piece-namespaces"
	// NeedsRESTMapper: resolves arbitrary resources (scale subresources,
	// owner references).
	NeedsRESTMapper Need = "restmapper"
	// NeedsMetadataInformers: watches every resource by metadata.
	NeedsMetadataInformers Need = "metadata-informers"
	// NeedsRootClient: uses the root client builder and starts before the
	// others, as in KCM.
	NeedsRootClient Need = "root-client"
	// NeedsCloud: does nothing without a cloud provider (returns no
	// controller, as in KCM).
	NeedsCloud Need = "cloud-provider"
	// NeedsClusterWidePods: caches every Pod or PersistentVolumeClaim of
	// the cluster (typed). Such singletons are placed together
	// (ColocatedSingletons): one replica holds that cache, not each, and
	// the metadata informers those among them share (the garbage
	// collector's and resourcequota's, every resource cluster-wide).
	NeedsClusterWidePods Need = "cluster-wide-pods"
)

// Entry is the fleet's placement of one upstream controller.
type Entry struct {
	Kind  Kind
	Needs []Need
	// Why the controller is placed so.
	Why string
}

// Catalog maps every upstream controller name to its placement. A
// controller is a partition controller only when that is safe: every write
// it makes to an object in namespace N is driven by namespaced informers,
// and cluster-scoped informers are lookups only. Anything else is a
// singleton.
var Catalog = map[string]Entry{
	"deployment-controller":            {Partition, nil, "Deployments, ReplicaSets and Pods of one namespace."},
	"replicaset-controller":            {Partition, nil, "ReplicaSets and their Pods, per namespace."},
	"replicationcontroller-controller": {Partition, nil, "ReplicationControllers and their Pods, per namespace."},
	"statefulset-controller":           {Partition, nil, "StatefulSets, Pods, PVCs and ControllerRevisions of one namespace."},
	"job-controller":                   {Partition, nil, "Jobs and their Pods, per namespace."},
	"cronjob-controller":               {Partition, nil, "CronJobs and their Jobs, per namespace."},
	"ttl-after-finished-controller":    {Partition, nil, "Deletes finished Jobs of its namespaces."},
	"disruption-controller":            {Partition, []Need{NeedsRESTMapper}, "PodDisruptionBudgets and Pods of one namespace; scale subresources through the RESTMapper."},
	"horizontal-pod-autoscaler-controller": {Partition, []Need{NeedsRESTMapper},
		"HPAs scale targets in their own namespace; metrics are read, never written."},
	"endpointslice-mirroring-controller":             {Partition, nil, "Mirrors Endpoints to EndpointSlices within a namespace."},
	"ephemeral-volume-controller":                    {Partition, nil, "Creates PVCs for Pods in the Pods' namespace."},
	"persistentvolumeclaim-protection-controller":    {Partition, nil, "Finalizers on PVCs, from Pods of the same namespace."},
	"legacy-serviceaccount-token-cleaner-controller": {Partition, nil, "Legacy token Secrets per namespace."},
	"daemonset-controller":                           {Partition, []Need{NeedsNodes}, "DaemonSet Pods per namespace; Nodes are lookups."},
	"endpoints-controller":                           {Partition, nil, "Endpoints from Services and Pods of one namespace."},
	"endpointslice-controller":                       {Partition, []Need{NeedsNodes}, "EndpointSlices from Services and Pods of one namespace; Nodes give topology only."},
	"taint-eviction-controller":                      {Partition, []Need{NeedsNodes}, "Evicts the piece's Pods from tainted Nodes; Nodes are lookups."},
	"serviceaccount-controller":                      {Partition, []Need{NeedsNamespaces}, "Creates the default ServiceAccount in each namespace it sees."},
	"root-ca-certificate-publisher-controller":       {Partition, []Need{NeedsNamespaces}, "Creates kube-root-ca.crt in each namespace it sees."},
	"serviceaccount-token-controller":                {Partition, []Need{NeedsRootClient}, "Token Secrets for ServiceAccounts, per namespace; KCM builds it by hand with the root client and starts it first."},

	"persistentvolume-expander-controller":                           {Singleton, []Need{NeedsClusterWidePods}, "Resizes PVCs and patches the bound, cluster-scoped PV, a write the partition fence cannot attribute to a namespace; one instance cluster-wide, as in KCM."},
	"device-taint-eviction-controller":                               {Singleton, []Need{NeedsNodes, NeedsClusterWidePods}, "Evicts Pods using tainted devices and writes cluster-scoped DeviceTaintRule status, which the partition fence cannot attribute to a namespace; one instance cluster-wide, as in KCM."},
	"resourceclaim-controller":                                       {Singleton, []Need{NeedsClusterWidePods}, "Remembers the Pods it saw deleted (an LRU of UIDs) and frees their claims' devices later without checking again; a partition's objects handed over as deletions when it moves away would free the devices of running Pods when it comes back (docs/controllers.md). One instance cluster-wide, as in KCM."},
	"garbage-collector-controller":                                   {Singleton, []Need{NeedsRESTMapper, NeedsMetadataInformers, NeedsClusterWidePods}, "Owner references cross namespaces and cluster scope; one graph of everything. Placed with resourcequota, which watches the same resources' metadata, and reads Pods typed from the Pods held there, as in KCM."},
	"namespace-controller":                                           {Singleton, []Need{NeedsRESTMapper, NeedsMetadataInformers}, "Deletes everything in terminating namespaces, across all resources."},
	"resourcequota-controller":                                       {Singleton, []Need{NeedsRESTMapper, NeedsMetadataInformers, NeedsClusterWidePods}, "Counts every resource by discovery; not yet proven safe per partition."},
	"pod-garbage-collector-controller":                               {Singleton, []Need{NeedsNodes, NeedsClusterWidePods}, "Its terminated-pod threshold is cluster-wide."},
	"node-lifecycle-controller":                                      {Singleton, []Need{NeedsNodes, NeedsClusterWidePods}, "Writes Node status and taints."},
	"node-ipam-controller":                                           {Singleton, []Need{NeedsNodes}, "Allocates Node pod CIDRs."},
	"ttl-controller":                                                 {Singleton, []Need{NeedsNodes}, "Annotates Nodes."},
	"persistentvolume-binder-controller":                             {Singleton, []Need{NeedsClusterWidePods}, "Binds cluster-scoped PersistentVolumes to claims of any namespace."},
	"persistentvolume-attach-detach-controller":                      {Singleton, []Need{NeedsNodes, NeedsClusterWidePods}, "Writes Node volume status for Pods of every namespace."},
	"persistentvolume-protection-controller":                         {Singleton, nil, "Finalizers on cluster-scoped PersistentVolumes."},
	"volumeattributesclass-protection-controller":                    {Singleton, []Need{NeedsClusterWidePods}, "Finalizers on cluster-scoped VolumeAttributesClasses."},
	"certificatesigningrequest-signing-controller":                   {Singleton, nil, "CertificateSigningRequests are cluster-scoped."},
	"certificatesigningrequest-approving-controller":                 {Singleton, nil, "CertificateSigningRequests are cluster-scoped."},
	"certificatesigningrequest-cleaner-controller":                   {Singleton, nil, "CertificateSigningRequests are cluster-scoped."},
	"podcertificaterequest-cleaner-controller":                       {Singleton, nil, "Feature-gated; not yet proven safe per partition."},
	"clusterrole-aggregation-controller":                             {Singleton, nil, "ClusterRoles are cluster-scoped."},
	"service-cidr-controller":                                        {Singleton, nil, "ServiceCIDRs and IPAddresses are cluster-scoped."},
	"validatingadmissionpolicy-status-controller":                    {Singleton, nil, "ValidatingAdmissionPolicies are cluster-scoped. Built with its OpenAPI definitions loaded at a type check and dropped after two idle minutes, not held from the start as in KCM (vapstatus.go)."},
	"storage-version-migrator-controller":                            {Singleton, []Need{NeedsRESTMapper}, "Migrates whole resources across namespaces. Its gate StorageVersionMigrator is off by default (its constructor then builds nothing); with the gate on the fleet does not run it: see below."},
	"storageversion-garbage-collector-controller":                    {Singleton, nil, "StorageVersions and apiserver Leases are cluster state."},
	"kube-apiserver-serving-clustertrustbundle-publisher-controller": {Singleton, nil, "ClusterTrustBundles are cluster-scoped."},
	"podgroup-protection-controller":                                 {Singleton, []Need{NeedsClusterWidePods}, "Feature-gated; not yet proven safe per partition."},
	"resourcepoolstatusrequest-controller":                           {Singleton, nil, "Feature-gated; cluster-scoped requests."},
	"bootstrap-signer-controller":                                    {Singleton, nil, "Off by default, as in KCM. Signs the kube-public cluster-info ConfigMap."},
	"token-cleaner-controller":                                       {Singleton, nil, "Off by default, as in KCM. Bootstrap tokens live in kube-system."},
	"selinux-warning-controller":                                     {Singleton, []Need{NeedsClusterWidePods}, "Off by default, as in KCM. Compares Pods across namespaces."},
	"cloud-node-lifecycle-controller":                                {Singleton, []Need{NeedsCloud}, "Cloud-only: nothing runs without a cloud provider, as in KCM."},
	"node-route-controller":                                          {Singleton, []Need{NeedsCloud}, "Cloud-only: nothing runs without a cloud provider, as in KCM."},
	"service-lb-controller":                                          {Singleton, []Need{NeedsCloud}, "Cloud-only: nothing runs without a cloud provider, as in KCM."},
}

// ColocatedSingletons names the singletons placed together on the ring
// (shard.RingConfig.Colocated): those that cache every Pod or PVC. The
// list is fixed by the binary, so every replica of one version computes
// the same placement.
func ColocatedSingletons() string {
	var out []string
	for name, e := range Catalog {
		if e.Kind == Singleton && slices.Contains(e.Needs, NeedsClusterWidePods) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// Descriptors is KCM's own list of controllers, the single source of names,
// aliases, constructors, feature gates and defaults.
func Descriptors() map[string]*kcmapp.ControllerDescriptor {
	return kcmapp.NewControllerDescriptors()
}

// Check reports every upstream controller the catalog does not place, and
// every catalog entry upstream does not have.
func Check(descriptors map[string]*kcmapp.ControllerDescriptor) error {
	var missing, extra []string
	for name := range descriptors {
		if _, ok := Catalog[name]; !ok {
			missing = append(missing, name)
		}
	}
	for name := range Catalog {
		if _, ok := descriptors[name]; !ok {
			extra = append(extra, name)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing)+len(extra) > 0 {
		return fmt.Errorf("catalog out of date with kube-controller-manager: not placed %v, unknown %v", missing, extra)
	}
	return nil
}

// Markdown renders the catalog as the table in docs/controllers.md.
func Markdown(descriptors map[string]*kcmapp.ControllerDescriptor) string {
	names := make([]string, 0, len(Catalog))
	for name := range Catalog {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := Catalog[names[i]], Catalog[names[j]]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return names[i] < names[j]
	})
	var b strings.Builder
	b.WriteString("| controller | aliases | runs as | needs | default | why |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, name := range names {
		e := Catalog[name]
		needs := make([]string, len(e.Needs))
		for i, n := range e.Needs {
			needs[i] = string(n)
		}
		def := "on"
		var aliases []string
		if d := descriptors[name]; d != nil {
			aliases = d.GetAliases()
			switch {
			case d.IsDisabledByDefault():
				def = "off"
			case len(d.GetRequiredFeatureGates()) > 0:
				gates := make([]string, 0, len(d.GetRequiredFeatureGates()))
				for _, g := range d.GetRequiredFeatureGates() {
					gates = append(gates, string(g))
				}
				def = "gates: " + strings.Join(gates, ", ")
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", name, strings.Join(aliases, ", "), e.Kind, strings.Join(needs, ", "), def, e.Why)
	}
	return b.String()
}

// Has says whether the entry lists need n.
func (e Entry) Has(n Need) bool {
	return slices.Contains(e.Needs, n)
}
