#!/usr/bin/env python3
# The tables of docs/results/sequencer-*.md from fabkv-bench JSON lines (one or more files, or
# reps of the same matrix): median throughput and p50 per (provider, window, clients, protocol),
# verbs and bytes per request, the sequence checks and seq-spec's mis-speculation.
#   scripts/sequencer-table.py docs/results/sequencer-2026-11-23.jsonl
import json,sys,statistics
rows=[]
for f in sys.argv[1:]:
    rows+=[json.loads(l) for l in open(f)]
by={}
for r in rows: by.setdefault((r['provider'],r['window'],r['clients'],r['protocol']),[]).append(r)
print("runs:", len(rows), "all checks ok:", all(r['check']['ok'] for r in rows),
      "values checked:", sum(r['sequence_check']['values'] for r in rows if r['clients']==8),
      "max gaps:", max(r['sequence_check']['gaps'] for r in rows))
print()
print("| provider | window | clients | seq-rpc Mops/s | seq-spec Mops/s | seq-atomic Mops/s | p50 us rpc / spec / atomic |")
print("|---|---|---|---|---|---|---|")
keys=sorted({k[:3] for k in by}, key=lambda k:(k[0]!='shm',k[1],k[2]))
def med(k,f):
    return statistics.median(f(r) for r in by[k]) if k in by else None
for k in keys:
    t=[med(k+(p,),lambda r:r['throughput_ops']/1e6) for p in ('seq-rpc','seq-spec','seq-atomic')]
    l=[med(k+(p,),lambda r:r['latency_us']['p50']) for p in ('seq-rpc','seq-spec','seq-atomic')]
    n=len(by.get(k+('seq-rpc',),[]))
    print("| %s | %d | %d | %.3f | %.3f | %.3f | %.1f / %.1f / %.1f |"%(k[0],k[1],k[2],*t,*l))
print()
print("medians of", n, "runs per cell")
# verbs and bytes per request
print()
print("| provider | protocol | verbs per request, client + server (send, recv, write, atomic) | bytes per request (w=16, c=8) |")
print("|---|---|---|---|")
for prov in ('shm','tcp'):
  for p in ('seq-rpc','seq-spec','seq-atomic'):
    rs=by[(prov,16,8,p)]
    fo=lambda v: statistics.median(r['fabric_ops_per_request'][v] for r in rs)
    b=statistics.median(r['fabric_bytes_per_request'] for r in rs)
    print("| %s | %s | %.2f, %.2f, %.2f, %.2f | %.1f |"%(prov,p,fo('send'),fo('recv'),fo('write'),fo('atomic'),b))
mis=[(r['provider'],r['window'],r['clients'],r['protocol_counters'].get('misspeculated')) for r in rows if r['protocol']=='seq-spec']
print()
print("seq-spec misspeculated (all runs):", sum(m[3] or 0 for m in mis), "of", sum(r['protocol_counters'].get('answers',0) for r in rows if r['protocol']=='seq-spec'))
print(rows[0]['machine'])
