"""Longest time a partition was unserved in a kept bench run.

Usage: python3 unserved.py KEEP_DIR...  (directories of `-keep`, with fcm-*.log)

A partition is unserved from its "Piece stopped" on one replica to its next
"Starting piece" on any replica, plus the wait before its controllers
serve it when it came back within 5 s ("Partition came back early").
"""
import glob
import re
import sys

STAMP = re.compile(r'^[IWE]\d{4} (\d\d):(\d\d):(\d\d\.\d+)')


def seconds(line):
    h, m, s = STAMP.match(line).groups()
    return int(h) * 3600 + int(m) * 60 + float(s)


def events(run):
    out = []
    for path in glob.glob(run + '/fcm-*.log'):
        for line in open(path, errors='replace'):
            if 'piece="partition/' in line and ('"Piece stopped"' in line or '"Starting piece"' in line):
                p = int(re.search(r'piece="partition/(\d+)"', line).group(1))
                out.append((seconds(line), 'stop' if 'Piece stopped' in line else 'start', p, 0.0))
            elif 'came back early' in line:
                p = int(re.search(r'partition=(\d+)', line).group(1))
                # Logged before a fixed wait (wait=) or after a wait on
                # the queues (waited=): served at the end of it.
                m = re.search(r' wait="([\d.]+)(ms|s)"', line)
                wait = float(m.group(1)) / (1000 if m.group(2) == 'ms' else 1) if m else 0.0
                out.append((seconds(line), 'early', p, wait))
    return sorted(out)


for run in sys.argv[1:]:
    stopped, started, gaps, early = {}, {}, {}, 0
    for at, kind, p, wait in events(run):
        if kind == 'stop':
            stopped[p] = at
        elif kind == 'start' and p in stopped:
            started[p] = stopped.pop(p)
            gaps[(p, started[p])] = at - started[p]
        elif kind == 'early' and p in started:
            early += 1
            since = started.pop(p)
            gaps[(p, since)] = at + wait - since
    worst = sorted(((g, p) for (p, _), g in gaps.items()), reverse=True)[:3]
    print(run, 'moves', len(gaps), 'early waits', early,
          'longest unserved %.2f s' % (worst[0][0] if worst else 0),
          'partitions', [p for _, p in worst])
