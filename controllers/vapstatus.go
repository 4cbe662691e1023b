package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	apiextensionsscheme "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/scheme"
	"k8s.io/apimachinery/pkg/runtime/schema"
	pluginvalidatingadmissionpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	k8sscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	"k8s.io/kube-openapi/pkg/validation/spec"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
	"k8s.io/kubernetes/pkg/controller/validatingadmissionpolicystatus"
	"k8s.io/kubernetes/pkg/generated/openapi"
)

// fleetConstructors are the controllers the fleet builds with its own
// constructor rather than KCM's descriptor, each a copy of KCM's with one
// difference, said at the constructor.
var fleetConstructors = map[string]kcmapp.ControllerConstructor{
	names.ValidatingAdmissionPolicyStatusController: newValidatingAdmissionPolicyStatusController,
}

// definitionsIdle is how long the validatingadmissionpolicy-status
// controller keeps the compiled-in OpenAPI definitions after its last type
// check: policies are usually written in bursts (one apply of many).
const definitionsIdle = 2 * time.Minute

// newValidatingAdmissionPolicyStatusController is KCM's constructor
// (cmd/kube-controller-manager/app/validatingadmissionpolicystatus.go,
// v1.36.3) but for when the compiled-in OpenAPI definitions are loaded.
// KCM loads them when the controller starts and keeps them for the life
// of the process, a large part of a small replica's live heap. The
// controller type checks a policy only when its generation is ahead of
// its status (reconcile), so a settled cluster never reads them; here they
// are loaded at the first type check and dropped definitionsIdle after
// the last. The schemas resolved are the same: the same definitions, then
// the same discovery resolver.
func newValidatingAdmissionPolicyStatusController(ctx context.Context, controllerContext kcmapp.ControllerContext, controllerName string) (kcmapp.Controller, error) {
	discoveryClient, err := controllerContext.ClientBuilder.DiscoveryClient(names.ValidatingAdmissionPolicyStatusController)
	if err != nil {
		return nil, fmt.Errorf("failed to create discovery client for %s: %w", controllerName, err)
	}
	discovery := &resolver.ClientDiscoveryResolver{Discovery: discoveryClient}
	schemaResolver := newIdleDroppedResolver(func() resolver.SchemaResolver {
		return resolver.NewDefinitionsSchemaResolver(openapi.GetOpenAPIDefinitions, k8sscheme.Scheme, apiextensionsscheme.Scheme).Combine(discovery)
	}, definitionsIdle, realIdleClock{}, klog.FromContext(ctx))
	typeChecker := &pluginvalidatingadmissionpolicy.TypeChecker{
		SchemaResolver: schemaResolver,
		RestMapper:     controllerContext.RESTMapper,
	}
	client, err := controllerContext.NewClient(names.ValidatingAdmissionPolicyStatusController)
	if err != nil {
		return nil, err
	}
	c, err := validatingadmissionpolicystatus.NewController(
		controllerContext.InformerFactory.Admissionregistration().V1().ValidatingAdmissionPolicies(),
		client.AdmissionregistrationV1().ValidatingAdmissionPolicies(),
		typeChecker,
	)
	if err != nil {
		return nil, err
	}
	return controllerLoop{name: controllerName, run: func(ctx context.Context) {
		defer schemaResolver.stop()
		c.Run(ctx, int(controllerContext.ComponentConfig.ValidatingAdmissionPolicyStatusController.ConcurrentPolicySyncs))
	}}, nil
}

// idleDroppedResolver builds a schema resolver at its first use and drops
// it once unused for idle, to build it again at the next use.
type idleDroppedResolver struct {
	build  func() resolver.SchemaResolver
	idle   time.Duration
	clock  idleClock
	logger klog.Logger

	mu       sync.Mutex
	built    resolver.SchemaResolver
	lastUsed time.Time
	armed    bool // an expiry check is scheduled
	stopped  bool
}

// idleClock is the time the resolver reads and schedules its expiry on.
// Not k8s.io/utils/clock: its fake runs scheduled functions under its own
// lock, so a function scheduling the next check deadlocks there.
type idleClock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func())
}

type realIdleClock struct{}

func (realIdleClock) Now() time.Time                      { return time.Now() }
func (realIdleClock) AfterFunc(d time.Duration, f func()) { time.AfterFunc(d, f) }

func newIdleDroppedResolver(build func() resolver.SchemaResolver, idle time.Duration, clk idleClock, logger klog.Logger) *idleDroppedResolver {
	return &idleDroppedResolver{build: build, idle: idle, clock: clk, logger: logger}
}

// ResolveSchema resolves with the built resolver, building it first if
// it was dropped. Resolution runs outside the lock: the discovery
// resolver behind the definitions calls the apiserver, and the
// controller's workers type check concurrently.
func (r *idleDroppedResolver) ResolveSchema(gvk schema.GroupVersionKind) (*spec.Schema, error) {
	return r.get().ResolveSchema(gvk)
}

func (r *idleDroppedResolver) get() resolver.SchemaResolver {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastUsed = r.clock.Now()
	if r.built == nil {
		r.built = r.build()
		r.logger.V(2).Info("Loaded the OpenAPI definitions for type checking", "took", r.clock.Now().Sub(r.lastUsed), "droppedAfterIdle", r.idle)
	}
	if !r.armed && !r.stopped {
		r.armed = true
		r.clock.AfterFunc(r.idle, r.expire)
	}
	return r.built
}

// expire drops the resolver if it was not used for idle, or checks again
// when idle has passed since the last use.
func (r *idleDroppedResolver) expire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	if left := r.idle - r.clock.Now().Sub(r.lastUsed); left > 0 {
		r.clock.AfterFunc(left, r.expire)
		return
	}
	r.armed = false
	r.built = nil
	r.logger.V(2).Info("Dropped the OpenAPI definitions for type checking", "idle", r.idle)
}

// stop drops the resolver for good, when the controller stops; a check
// still scheduled then does nothing.
func (r *idleDroppedResolver) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	r.built = nil
}

// loaded says whether the resolver is built now.
func (r *idleDroppedResolver) loaded() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.built != nil
}
