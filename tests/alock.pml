/* tests/alock.pml - a Promela model of alock.h's protocol (ALock), checked by Spin through
 * tests/alock_model.sh. Two local processes (CPU loads, stores and atomics on the lock line
 * and on each other's descriptors) and two remote processes (RDMA READ, WRITE and
 * compare-and-swap), each taking the lock forever: lock, critical section, unlock.
 *
 * What is modelled as the hardware does it, not as the algorithm would like:
 *  - an RDMA READ of the lock line is separate word reads, in either order, each of which may
 *    interleave with any other step (rxe copies the line with memcpy);
 *  - a remote atomic is what Soft-RoCE does: under one driver spinlock (rx) a plain load, then
 *    a plain store; a CPU step can fall between the two. Remote atomics exclude each other, not
 *    the CPU;
 *  - RDMA WRITE and CPU stores are single-word stores; RDMA operations of one process are done
 *    in order (an RC queue pair), modelled as that process's steps in program order.
 *  - every spin-wait on another process's word is a loop of separate reads, not an atomic guard.
 *
 * Properties: mutual exclusion (assert in the critical section), no invalid end state (no
 * deadlock: pan's default), and, under weak fairness, that every local process that wants the
 * lock gets it (ltl local_gets_lock) and every remote process that has enqueued gets it (ltl
 * remote_queued_gets_lock). remote_gets_lock (from wanting, not from enqueueing) does NOT hold:
 * the CAS loop that emulates swap can lose forever; the test expects that counter-example.
 * -DTIMEOUTS adds alock_lock_timeout to the local processes: a waiter may give up (its descriptor
 * stays queued, marked abandoned, and the granter passes over it), a leader may leave the head
 * of the queue from Peterson's loop (its successor re-arbitrates).
 * Mutants (-D at spin -a): MUT_CPU_XCHG_RTAIL - local processes join the remote queue with a
 * CPU exchange on the remote tail (the design ALock exists to avoid); MUT_NO_VICTIM - the local
 * leader does not write the victim word; MUT_NO_BUDGET - a cohort hands the lock on forever
 * without re-arbitrating (no budget); with TIMEOUTS, MUT_GRANT_NO_CAS - the lock is handed to a
 * waiter with a plain store, blind to its having given up. Each must give a counter-example. */

#ifndef BUDGET
#define BUDGET 2
#endif
#define NONE 0
#define WAIT 255            /* a descriptor's budget while its owner waits (-1 in alock.h) */
#define ABANDONED 254       /* TIMEOUTS: its owner's deadline passed (-2 in alock.h) */
#define LOCAL 1
#define REMOTE 2

byte l_tail, r_tail;        /* the lock line: descriptor ids, 0 = empty cohort */
byte victim = LOCAL;
byte next[5];               /* descriptors 1..4: 1 and 2 local, 3 and 4 remote */
byte budget[5];
bit rx_next, rx_serving;    /* rxe's atomic_ops_lock, a fair (ticket) spinlock of the two
                               remote processes: an unfair one would let Spin starve one */
byte incs;                  /* processes in the critical section */
bool want[5];
bool queued[5];             /* a remote process is past its enqueue (its CAS loop succeeded) */
bool freed[5];              /* TIMEOUTS: an abandoned descriptor was passed over and freed */

/* an RDMA compare-and-swap on r_tail as rxe performs it: lock, load, compare, store, unlock */
inline rxe_cas(expect, desired, old)
{
    atomic { tk = rx_next; rx_next = 1 - rx_next };
    atomic { rx_serving == tk -> old = r_tail; tk = 0 };
    if
    :: old == expect -> r_tail = desired
    :: else -> skip
    fi;
    rx_serving = 1 - rx_serving
}

inline crit(me)
{
    atomic { want[me] = 0; queued[me] = 0; incs++; assert(incs == 1) };
    incs--
}

/* hand the lock on within the cohort: the successor gets budget - 1; at 0 it re-arbitrates */
inline pass_on(me)
{
#ifdef MUT_NO_BUDGET
    budget[next[me]] = BUDGET
#else
    budget[next[me]] = budget[me] - 1
#endif
}

#ifdef TIMEOUTS
/* hand the lock (budget b) to local successor `first`; pass over the ones that gave up, as
   alock__grant does: CAS WAIT -> b, else unlink the abandoned one and go on */
inline grant_local(first, b)
{
    s = first; gb = b;
#ifdef MUT_GRANT_NO_CAS
    budget[s] = gb; s = 0; gb = 0;   /* the mutant: a plain store, blind to abandonment */
#else
    do
    :: atomic { budget[s] == WAIT -> budget[s] = gb; s = 0; gb = 0 }; break
    :: budget[s] == ABANDONED ->
       if
       :: next[s] == NONE ->
          atomic { if :: l_tail == s -> l_tail = NONE; freed[s] = 1; s = 0 :: else -> skip fi }
       :: else -> skip
       fi;
       if
       :: s == 0 -> gb = 0; break
       :: else ->
          (next[s] != NONE);
          n = next[s];
          freed[s] = 1;
          s = n; n = 0
       fi
    od
#endif
}
#endif

proctype Local(byte me)
{
    byte pred, rt, v;
#ifdef TIMEOUTS
    byte s, n, gb;
    bit lh;
#endif
again:
    atomic { want[me] = 1; budget[me] = WAIT; next[me] = NONE }; /* not yet published */
#ifdef MUT_CPU_XCHG_RTAIL
    /* the mutant: locals queue on the remote tail with a CPU exchange (atomic against the
       CPU, not against rxe's load-then-store) */
    atomic { pred = r_tail; r_tail = me };
#else
    atomic { pred = l_tail; l_tail = me };       /* CPU exchange on the local tail */
#endif
    if
    :: pred != NONE ->
        atomic { next[pred] = me; pred = 0 };
#ifdef TIMEOUTS
        do
        :: budget[me] != WAIT -> break
        :: atomic { budget[me] == WAIT -> budget[me] = ABANDONED }; /* the deadline passed */
           want[me] = 0;
           (freed[me]);      /* one descriptor per process here: wait until it is passed over */
           freed[me] = 0;
           goto again
        od;
#else
        (budget[me] != WAIT);
#endif
        if
        :: budget[me] > 0 -> goto cs
        :: else -> budget[me] = BUDGET
        fi
    :: else -> budget[me] = BUDGET
    fi;
#ifdef MUT_CPU_XCHG_RTAIL
    /* as a member of the remote cohort: Peterson as the remote side does it */
    victim = REMOTE;
    do
    :: rt = l_tail; v = victim;
       if :: rt == NONE || v != REMOTE -> break :: else -> skip fi
    od;
    atomic { rt = 0; v = 0 };
#else
    /* fast path: the remote flag is down right after ours went up: enter without victim */
    if
    :: r_tail == NONE -> skip
    :: else ->
#ifndef MUT_NO_VICTIM
        victim = LOCAL;
#endif
        do                                       /* two loads, r_tail first */
        :: rt = r_tail; v = victim;
           if :: rt == NONE || v != LOCAL -> break :: else -> skip fi
#ifdef TIMEOUTS
        :: rt = 0; v = 0;                        /* the deadline passed: leave the head */
           if
           :: next[me] == NONE ->
              atomic { if :: l_tail == me -> l_tail = NONE; lh = 1 :: else -> skip fi }
           :: else -> skip
           fi;
           if
           :: lh -> lh = 0
           :: else -> (next[me] != NONE); grant_local(next[me], 0)
           fi;
           want[me] = 0;
           goto again
#endif
        od;
        atomic { rt = 0; v = 0 }
    fi;
#endif
cs:
    crit(me);
    if
    :: next[me] == NONE ->
#ifdef MUT_CPU_XCHG_RTAIL
        atomic { if :: r_tail == me -> r_tail = NONE; goto again :: else -> skip fi };
#else
        atomic { if :: l_tail == me -> l_tail = NONE; goto again :: else -> skip fi };
#endif
        (next[me] != NONE)
    :: else -> skip
    fi;
#ifdef TIMEOUTS
    grant_local(next[me], budget[me] - 1);
#else
    pass_on(me);
#endif
    goto again
}

proctype Remote(byte me)
{
    byte pred, old, lt, v;
    bit tk;
again:
    atomic { want[me] = 1; budget[me] = WAIT; next[me] = NONE; pred = NONE };
    do                                           /* swap emulated with a CAS loop */
    :: rxe_cas(pred, me, old);
       if :: old == pred -> break :: else -> pred = old fi
    od;
    atomic { old = 0; queued[me] = 1 };
    if
    :: pred != NONE ->
        atomic { next[pred] = me; pred = 0 };    /* RDMA WRITE into pred's descriptor */
        (budget[me] != WAIT);                    /* spins on its own memory */
        if
        :: budget[me] > 0 -> goto cs
        :: else -> budget[me] = BUDGET
        fi
    :: else -> budget[me] = BUDGET
    fi;
    lt = l_tail;                                 /* RDMA READ: the local flag is down: */
    if                                           /* enter without writing victim */
    :: lt == NONE -> skip
    :: else ->
        victim = REMOTE;                         /* RDMA WRITE */
        do                                       /* RDMA READ of the line: word by word */
        :: if
           :: lt = l_tail; v = victim
           :: v = victim; lt = l_tail
           fi;
           if :: lt == NONE || v != REMOTE -> break :: else -> skip fi
        od
    fi;
    atomic { lt = 0; v = 0 };
cs:
    crit(me);
    if
    :: next[me] == NONE ->
        rxe_cas(me, NONE, old);
        if :: old == me -> old = 0; goto again :: else -> old = 0 fi;
        (next[me] != NONE)
    :: else -> skip
    fi;
    pass_on(me);                                 /* RDMA WRITE into the successor's */
    goto again
}

init
{
    atomic {
        run Local(1); run Local(2); run Remote(3); run Remote(4)
    }
}

ltl local_gets_lock { [] (want[1] -> <> !want[1]) }
/* A remote process that has enqueued gets the lock. Before that it may not: verbs has no swap,
   and the compare-and-swap loop that stands in for one is lock-free, not starvation-free (another
   remote process can win every race); remote_gets_lock gives that counter-example. */
ltl remote_queued_gets_lock { [] (queued[3] -> <> !queued[3]) }
ltl remote_gets_lock { [] (want[3] -> <> !want[3]) }
