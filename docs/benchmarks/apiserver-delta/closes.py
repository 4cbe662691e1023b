import json,sys,re,datetime,collections
d=sys.argv[1]
closes=[]
for line in open(d+'/kube-apiserver.log'):
    m=re.search(r'^I\d{4} (\d\d:\d\d:\d\d\.\d+).*Forcing (\S+) watcher close.*fields: "([^"]*)".*len\(c.input\) = (\d+), len\(c.result\) = (\d+)',line)
    if m:
        t=datetime.datetime.strptime(m.group(1)[:15],'%H:%M:%S.%f')
        closes.append((t,m.group(2),m.group(3),int(m.group(4)),int(m.group(5))))
ends=[]
for line in open(d+'/audit.log'):
    e=json.loads(line)
    if e.get('verb')!='watch' or e.get('stage')!='ResponseComplete': continue
    t=datetime.datetime.strptime(e['stageTimestamp'][11:26],'%H:%M:%S.%f')
    ua=e.get('userAgent','')
    ua=re.sub(r'/v0\.0\.0.*?\$Format/?','',ua)
    sel='sel' if 'shardSelector' in e['requestURI'] else ''
    from urllib.parse import urlparse,parse_qs
    fs=parse_qs(urlparse(e['requestURI']).query).get('fieldSelector',[''])[0]
    ends.append((t,e['objectRef'].get('resource'),ua,sel,fs))
used=set()
who=collections.Counter()
for (t,res,fields,inp,resl) in closes:
    best=None
    for i,(te,r,ua,sel,e) in enumerate(ends):
        if i in used or r!=res or e!=fields: continue
        dt=abs((te-t).total_seconds())
        if dt<2.0 and (best is None or dt<best[0]): best=(dt,i)
    if best:
        used.add(best[1]); te,r,ua,sel,e=ends[best[1]]
        key=f"{res} {ua} {sel} fields={fields!r}"
    else:
        key=f"{res} ? fields={fields!r}"
    full = 'both-full' if resl>=inp and inp>0 else ('input-full' if resl==0 else 'partial')
    who[(key,full)]+=1
print(len(closes),'closes')
for k,v in who.most_common(): print(v,k)
# bursts: first close of each burst
print('--- bursts')
prev=None; 
for (t,res,fields,inp,resl) in closes:
    if prev is None or (t-prev).total_seconds()>0.5:
        # find matched who
        cand=[(abs((te-t).total_seconds()),ua,sel) for (te,r,ua,sel,fs) in ends if r==res and fs==fields and abs((te-t).total_seconds())<2]
        cand.sort()
        print(t.strftime('%H:%M:%S.%f')[:12], res, repr(fields), f'{inp}/{resl}', cand[0][1:] if cand else '?')
    prev=t
