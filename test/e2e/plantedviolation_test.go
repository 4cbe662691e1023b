//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// TestCheckerCatchesTwoOwners plants the violation the ownership checker
// exists for: beside a fleet replica, a second replica that shares none of
// its protocol (another fleet name, kube-controller-manager's leader Lease
// not taken) runs the same controllers for a few seconds while the
// workload changes. The checker must name the piece, both replicas and
// the writes made while both ran it; before the rogue started, it must
// find nothing.
func TestCheckerCatchesTwoOwners(t *testing.T) {
	inLane(t, laneLight)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cluster, client, bin := podCluster(ctx, t)
	const owner, rogue = "fcm-a", "rogue"
	ns, p := namespaceMovingTo(owner, []string{owner})
	piece := string(shard.PartitionPiece(p))
	ownerProc, _, err := cluster.StartFleetReplica(ctx, bin, owner, "-v=2")
	if err != nil {
		t.Fatal(err)
	}
	waitRunsPiece(ctx, t, client, owner, piece)
	createMovingWorkload(ctx, t, client, ns)
	logs := map[string]string{owner: ownerProc.LogPath}
	if found, judged := checkRunsAgainstAudit(t, cluster.AuditLog, logs, nil, nil, []string{ns}, shard.DefaultRingConfig); len(found) > 0 {
		t.Fatalf("violations before the rogue started: %v", found)
	} else {
		t.Logf("before the rogue: %d partition controller writes into %s, %d singleton writes, no violation", judged.inNamespaces, ns, judged.singleton)
	}

	rogueProc, _, err := cluster.StartFleetReplica(ctx, bin, rogue, "--fleet-name=rogue", "--leader-elect=false", "-v=2")
	if err != nil {
		t.Fatal(err)
	}
	logs[rogue] = rogueProc.LogPath
	// Started is not yet serving: the rogue's controllers act on the
	// partition once its objects are cached and handed to them ("Partition
	// gained"); a scale before that is handled by the owner alone.
	gained := fmt.Sprintf(`"Partition gained" partition=%d `, p)
	poll(ctx, t, rogue+" to serve "+piece, 2*time.Minute, func() (bool, string) {
		log, err := os.ReadFile(rogueProc.LogPath)
		if err != nil {
			return false, err.Error()
		}
		return len(ownership(t, rogueProc.LogPath, piece)) > 0 && strings.Contains(string(log), gained), "not yet"
	})
	// Both now hold the Deployment's expectations; a scale makes both act.
	scaleMoving(ctx, t, client, ns, 6)
	createMoveJob(ctx, t, client, ns, 1)
	// Until the rogue has written into ns while the owner runs the piece:
	// the violation the checker must name below.
	poll(ctx, t, rogue+" to write into "+ns+" while "+owner+" runs "+piece, 2*time.Minute, func() (bool, string) {
		for _, v := range checkOwnership(t, cluster.AuditLog, logs, []string{ns}) {
			if v.piece == piece && writesBy(v, rogue) > 0 {
				return true, ""
			}
		}
		return false, "no write by " + rogue + " yet"
	})
	if err := rogueProc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-rogueProc.Done()

	found := checkOwnership(t, cluster.AuditLog, logs, []string{ns})
	var named *ownershipViolation
	for i, v := range found {
		t.Logf("checker: %v", v)
		if v.piece == piece && slices.Contains(v.replicas, owner) && slices.Contains(v.replicas, rogue) && len(v.writes) > 0 {
			named = &found[i]
		}
	}
	if named == nil {
		t.Fatalf("the checker did not name %s run by %s and %s with the writes made meanwhile (found %d violations)", piece, owner, rogue, len(found))
	}
	rogueWrites := writesBy(*named, rogue)
	if rogueWrites == 0 {
		t.Errorf("the named writes include none by %s: %v", rogue, named.writes)
	}
	t.Logf("the checker named %s, %v, and %d writes made while both ran it (%d by %s)", named.piece, named.replicas, len(named.writes), rogueWrites, rogue)
}

// writesBy counts the writes of v made by replica.
func writesBy(v ownershipViolation, replica string) int {
	n := 0
	for _, w := range v.writes {
		if strings.Contains(w, " by "+replica+" ") {
			n++
		}
	}
	return n
}
