"""The array cache's table and the functions numpy calls, in LLVM IR (compiled in
``__init__``): malloc, calloc, realloc and free, and the eviction that frees kept blocks."""

# blocks below 8 MiB stay with malloc, whose heap keeps them (``_malloc.py``) and can serve a
# request of any smaller size from them (the line is drawn in whole pages: a block's usable
# size, less than a page above its request, then tells realloc which side it was on). Kept
# here from 1 MiB, the per-step peak of the CNN workloads rose 10-40% (blocks kept by size that
# no later array of that size took), while nanoGPT's step took the same time (AMD Zen 4,
# 2 threads: 9.7 s, 8.9-10.8 s from 1 MiB)
MIN = 8 << 20
SLOTS, DEPTH = 256, 64  # sizes kept, blocks kept per size
SMALL, SMALL_DEPTH = 1024, 7  # blocks under 1 KiB: 7 kept per size in bytes (numpy's own rule)
# State words: 0 kept bytes, 1 cap, 2 MIN, 3 hits, 4 misses, 5 SLOTS, 6 DEPTH, 7 live bytes,
# 8 high-water mark of live bytes, 9 blocks freed to make room, 10 whether the C library's
# usable size of a block is under a page above its request (``__init__._tight``); slot s at
# 16 + s * (DEPTH + 2): its size, how many blocks it holds, the blocks; then, for each size
# under SMALL bytes, how many blocks of it are kept and the blocks (SMALL_DEPTH + 1 words).
HEAD = 16
SMALL_AT = HEAD + SLOTS * (DEPTH + 2)

IR = r"""
declare ptr @malloc(i64)
declare ptr @calloc(i64, i64)
declare ptr @realloc(ptr, i64)
declare void @free(ptr)
declare i64 @malloc_usable_size(ptr)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
declare {i64, i1} @llvm.umul.with.overflow.i64(i64, i64)

define internal i64 @get(ptr %s, i64 %i) alwaysinline {
  %p = getelementptr i64, ptr %s, i64 %i
  %v = load i64, ptr %p
  ret i64 %v
}
define internal void @put(ptr %s, i64 %i, i64 %v) alwaysinline {
  %p = getelementptr i64, ptr %s, i64 %i
  store i64 %v, ptr %p
  ret void
}
define internal void @bump(ptr %s, i64 %i, i64 %d) alwaysinline {
  %v = call i64 @get(ptr %s, i64 %i)
  %w = add i64 %v, %d
  call void @put(ptr %s, i64 %i, i64 %w)
  ret void
}
define internal i64 @pagesize(i64 %n) alwaysinline {
  %a = add i64 %n, 4095
  %k = and i64 %a, -4096
  ret i64 %k
}
; the bytes a block of `size` bytes is kept and counted live as: its whole pages when they come
; to MIN or more, else 0 (malloc's, not counted)
define internal i64 @large(ptr %s, i64 %size) alwaysinline {
  %k = call i64 @pagesize(i64 %size)
  %min = call i64 @get(ptr %s, i64 2)
  %small = icmp ult i64 %k, %min
  %r = select i1 %small, i64 0, i64 %k
  ret i64 %r
}
; a block of `key` bytes no longer live (never below zero)
define internal void @uncount(ptr %s, i64 %key) alwaysinline {
  %live = call i64 @get(ptr %s, i64 7)
  %l1 = sub i64 %live, %key
  %neg = icmp slt i64 %l1, 0
  %l2 = select i1 %neg, i64 0, i64 %l1
  call void @put(ptr %s, i64 7, i64 %l2)
  ret void
}

; A stack of kept blocks, a size's: a count word `st` points at, then that many block addresses.
; The top block, taken off (null when the stack is empty)
define internal ptr @pop_block(ptr %st) alwaysinline {
entry:
  %c = load i64, ptr %st
  %none = icmp eq i64 %c, 0
  br i1 %none, label %empty, label %pop
pop:
  %c1 = sub i64 %c, 1
  store i64 %c1, ptr %st
  %p = call i64 @get(ptr %st, i64 %c)
  %r = inttoptr i64 %p to ptr
  ret ptr %r
empty:
  ret ptr null
}
; `p` put on top unless the stack holds `depth` blocks already; whether it was
define internal i1 @push_block(ptr %st, i64 %depth, ptr %p) alwaysinline {
entry:
  %c = load i64, ptr %st
  %full = icmp uge i64 %c, %depth
  br i1 %full, label %no, label %push
push:
  %c1 = add i64 %c, 1
  %pv = ptrtoint ptr %p to i64
  call void @put(ptr %st, i64 %c1, i64 %pv)
  store i64 %c1, ptr %st
  ret i1 1
no:
  ret i1 0
}
; the stack of blocks under SMALL bytes of `size` bytes
define internal ptr @small_stack(ptr %s, i64 %size) alwaysinline {
  %o = mul i64 %size, STRIDE_SMALL
  %b = add i64 %o, SMALL_AT
  %st = getelementptr i64, ptr %s, i64 %b
  ret ptr %st
}
; the stack of slot word `b` (its size's word; the count follows)
define internal ptr @slot_stack(ptr %s, i64 %b) alwaysinline {
  %ci = add i64 %b, 1
  %st = getelementptr i64, ptr %s, i64 %ci
  ret ptr %st
}

; the slot of `key`, else the first empty slot on its probe path, else -1 (table full)
define internal i64 @find(ptr %s, i64 %key) {
entry:
  %ns = call i64 @get(ptr %s, i64 5)
  %d = call i64 @get(ptr %s, i64 6)
  %stride = add i64 %d, 2
  %h0 = lshr i64 %key, 12
  %h = urem i64 %h0, %ns
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %next]
  %slot = phi i64 [%h, %entry], [%slot2, %next]
  %b0 = mul i64 %slot, %stride
  %b = add i64 %b0, HEAD
  %k = call i64 @get(ptr %s, i64 %b)
  %same = icmp eq i64 %k, %key
  %empty = icmp eq i64 %k, 0
  %stop = or i1 %same, %empty
  br i1 %stop, label %found, label %next
next:
  %i1 = add i64 %i, 1
  %slot1 = add i64 %slot, 1
  %wrap = icmp eq i64 %slot1, %ns
  %slot2 = select i1 %wrap, i64 0, i64 %slot1
  %all = icmp eq i64 %i1, %ns
  br i1 %all, label %full, label %loop
found:
  ret i64 %b
full:
  ret i64 -1
}

; a kept block of `key` bytes (counted live), or null (an empty slot holds no blocks)
define internal ptr @take(ptr %s, i64 %key) {
entry:
  %b = call i64 @find(ptr %s, i64 %key)
  %none = icmp slt i64 %b, 0
  br i1 %none, label %miss, label %slot
slot:
  %st = call ptr @slot_stack(ptr %s, i64 %b)
  %p = call ptr @pop_block(ptr %st)
  %empty = icmp eq ptr %p, null
  br i1 %empty, label %miss, label %hit
hit:
  %neg = sub i64 0, %key
  call void @bump(ptr %s, i64 0, i64 %neg)
  call void @bump(ptr %s, i64 7, i64 %key)
  call void @bump(ptr %s, i64 3, i64 1)
  ret ptr %p
miss:
  call void @bump(ptr %s, i64 4, i64 1)
  ret ptr null
}

; free kept blocks until at most `target` bytes are kept
define void @tg_evict(ptr %s, i64 %target) {
entry:
  %ns = call i64 @get(ptr %s, i64 5)
  %d = call i64 @get(ptr %s, i64 6)
  %stride = add i64 %d, 2
  br label %slots
slots:
  %slot = phi i64 [0, %entry], [%slot1, %nextslot]
  %more = icmp ult i64 %slot, %ns
  br i1 %more, label %slotbody, label %done
slotbody:
  %b0 = mul i64 %slot, %stride
  %b = add i64 %b0, HEAD
  %key = call i64 @get(ptr %s, i64 %b)
  %st = call ptr @slot_stack(ptr %s, i64 %b)
  br label %blocks
blocks:
  %kept = call i64 @get(ptr %s, i64 0)
  %over = icmp sgt i64 %kept, %target
  br i1 %over, label %pop, label %done
pop:
  %p = call ptr @pop_block(ptr %st)
  %empty = icmp eq ptr %p, null
  br i1 %empty, label %nextslot, label %release
release:
  call void @free(ptr %p)
  %kept1 = sub i64 %kept, %key
  call void @put(ptr %s, i64 0, i64 %kept1)
  call void @bump(ptr %s, i64 9, i64 1)
  br label %blocks
nextslot:
  %slot1 = add i64 %slot, 1
  br label %slots
done:
  ret void
}

; make room for `key` more live bytes within the high-water mark, count them live
define internal void @room(ptr %s, i64 %key) {
entry:
  %live = call i64 @get(ptr %s, i64 7)
  %peak = call i64 @get(ptr %s, i64 8)
  %t0 = sub i64 %peak, %live
  %t1 = sub i64 %t0, %key
  %neg = icmp slt i64 %t1, 0
  %target = select i1 %neg, i64 0, i64 %t1
  %kept = call i64 @get(ptr %s, i64 0)
  %over = icmp sgt i64 %kept, %target
  br i1 %over, label %evict, label %count
evict:
  call void @tg_evict(ptr %s, i64 %target)
  br label %count
count:
  %live1 = add i64 %live, %key
  call void @put(ptr %s, i64 7, i64 %live1)
  %up = icmp sgt i64 %live1, %peak
  %peak1 = select i1 %up, i64 %live1, i64 %peak
  call void @put(ptr %s, i64 8, i64 %peak1)
  ret void
}

; a fresh block of `n` bytes from the C library, cleared when `zero`
define internal ptr @fresh(i64 %n, i1 %zero) alwaysinline {
entry:
  br i1 %zero, label %clear, label %plain
clear:
  %c = call ptr @calloc(i64 1, i64 %n)
  ret ptr %c
plain:
  %m = call ptr @malloc(i64 %n)
  ret ptr %m
}
define internal void @clear(ptr %p, i64 %n, i1 %zero) alwaysinline {
entry:
  br i1 %zero, label %set, label %done
set:
  call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 %n, i1 0)
  br label %done
done:
  ret void
}

; malloc (calloc when `zero`). Blocks under SMALL bytes: numpy's default allocator keeps
; SMALL_DEPTH of each size, so does this one (a small array's malloc and free are a good part
; of a small op)
define internal ptr @alloc(ptr %s, i64 %size, i1 %zero) alwaysinline {
entry:
  %tiny = icmp ult i64 %size, SMALL
  br i1 %tiny, label %cached, label %sized
cached:
  %st = call ptr @small_stack(ptr %s, i64 %size)
  %q = call ptr @pop_block(ptr %st)
  %qmiss = icmp eq ptr %q, null
  br i1 %qmiss, label %plain, label %qhit
qhit:
  call void @clear(ptr %q, i64 %size, i1 %zero)
  ret ptr %q
sized:
  %key = call i64 @large(ptr %s, i64 %size)
  %small = icmp eq i64 %key, 0
  br i1 %small, label %plain, label %big
plain:
  %r = call ptr @fresh(i64 %size, i1 %zero)
  ret ptr %r
big:
  %p = call ptr @take(ptr %s, i64 %key)
  %miss = icmp eq ptr %p, null
  br i1 %miss, label %new, label %hit
hit:
  call void @clear(ptr %p, i64 %size, i1 %zero)
  ret ptr %p
new:
  call void @room(ptr %s, i64 %key)
  %n = call ptr @fresh(i64 %key, i1 %zero)
  %failed = icmp eq ptr %n, null
  br i1 %failed, label %retry, label %ok
ok:
  ret ptr %n
retry:
  call void @tg_evict(ptr %s, i64 0)
  %n2 = call ptr @fresh(i64 %key, i1 %zero)
  ret ptr %n2
}
define ptr @tg_malloc(ptr %s, i64 %size) {
  %p = call ptr @alloc(ptr %s, i64 %size, i1 0)
  ret ptr %p
}
define ptr @tg_calloc(ptr %s, i64 %nelem, i64 %elsize) {
entry:
  %m = call {i64, i1} @llvm.umul.with.overflow.i64(i64 %nelem, i64 %elsize)
  %size = extractvalue {i64, i1} %m, 0
  %ov = extractvalue {i64, i1} %m, 1
  br i1 %ov, label %none, label %sized
none:
  ret ptr null
sized:
  %p = call ptr @alloc(ptr %s, i64 %size, i1 1)
  ret ptr %p
}

; A grown or shrunk block stays a whole number of pages once it is large (so that the size it
; is later freed with never names more bytes than it has), and is counted live by its new size.
; numpy does not pass the old size: the C library's usable size of the block is less than a
; page above what was asked for (glibc, musl: word 10 says so), so its whole pages are the size
; it was counted as. Where it is not (size classes), realloc is not counted.
define ptr @tg_realloc(ptr %s, ptr %p, i64 %size) {
entry:
  %tight = call i64 @get(ptr %s, i64 10)
  %counts = icmp ne i64 %tight, 0
  %u = call i64 @malloc_usable_size(ptr %p)
  %u0 = and i64 %u, -4096
  %old0 = call i64 @large(ptr %s, i64 %u0)
  %old = select i1 %counts, i64 %old0, i64 0
  %key = call i64 @large(ptr %s, i64 %size)
  %small = icmp eq i64 %key, 0
  %want = select i1 %small, i64 %size, i64 %key
  %new = select i1 %counts, i64 %key, i64 0
  %grow = icmp ugt i64 %new, %old
  %more = sub i64 %new, %old
  br i1 %grow, label %room, label %move
room:
  call void @room(ptr %s, i64 %more)
  br label %move
move:
  %r = call ptr @realloc(ptr %p, i64 %want)
  %failed = icmp eq ptr %r, null
  br i1 %failed, label %retry, label %moved
retry:
  call void @tg_evict(ptr %s, i64 0)
  %r2 = call ptr @realloc(ptr %p, i64 %want)
  %failed2 = icmp eq ptr %r2, null
  br i1 %failed2, label %kept, label %moved
moved:
  %q = phi ptr [%r, %move], [%r2, %retry]
  %shrunk = sub i64 %old, %new
  %less = select i1 %grow, i64 0, i64 %shrunk
  call void @uncount(ptr %s, i64 %less)
  ret ptr %q
kept:
  %back = select i1 %grow, i64 %more, i64 0
  call void @uncount(ptr %s, i64 %back)
  ret ptr null
}

define void @tg_free(ptr %s, ptr %p, i64 %size) {
entry:
  %null = icmp eq ptr %p, null
  br i1 %null, label %done, label %some
some:
  %tiny = icmp ult i64 %size, SMALL
  br i1 %tiny, label %cached, label %sized
cached:
  %st = call ptr @small_stack(ptr %s, i64 %size)
  %q = call i1 @push_block(ptr %st, i64 SMALL_DEPTH, ptr %p)
  br i1 %q, label %done, label %plain
sized:
  %key = call i64 @large(ptr %s, i64 %size)
  %small = icmp eq i64 %key, 0
  br i1 %small, label %plain, label %big
big:
  call void @uncount(ptr %s, i64 %key)
  %l2 = call i64 @get(ptr %s, i64 7)
  %kept = call i64 @get(ptr %s, i64 0)
  %cap = call i64 @get(ptr %s, i64 1)
  %total = add i64 %kept, %key
  %overcap = icmp ugt i64 %total, %cap
  ; kept + live stays within the high-water mark
  %sum = add i64 %total, %l2
  %peak = call i64 @get(ptr %s, i64 8)
  %overpeak = icmp ugt i64 %sum, %peak
  %over = or i1 %overcap, %overpeak
  br i1 %over, label %plain, label %look
look:
  %b = call i64 @find(ptr %s, i64 %key)
  %none = icmp slt i64 %b, 0
  br i1 %none, label %plain, label %slot
slot:
  %d = call i64 @get(ptr %s, i64 6)
  %sst = call ptr @slot_stack(ptr %s, i64 %b)
  %kept1 = call i1 @push_block(ptr %sst, i64 %d, ptr %p)
  br i1 %kept1, label %keep, label %plain
keep:
  call void @put(ptr %s, i64 %b, i64 %key)
  call void @put(ptr %s, i64 0, i64 %total)
  br label %done
plain:
  call void @free(ptr %p)
  br label %done
done:
  ret void
}
""".replace("SMALL_AT", str(SMALL_AT)).replace("STRIDE_SMALL", str(SMALL_DEPTH + 1)).replace(
    "SMALL_DEPTH", str(SMALL_DEPTH)).replace("SMALL", str(SMALL)).replace("HEAD", str(HEAD))
