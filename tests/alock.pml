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
 * -DRTIMEOUTS adds alock_remote_lock_timeout to the remote processes: a queued remote waiter
 * gives up with an RDMA compare-and-swap of its own budget word (through its loopback link, so
 * under rxe's lock), a remote leader leaves the head from Peterson's loop; a remote hand-off is
 * an RDMA compare-and-swap of the successor's budget (WAIT -> b) and passes over the ones that
 * gave up (READ of its next, compare-and-swap of r_tail, WRITE that frees it).
 * Mutants (-D at spin -a): MUT_CPU_XCHG_RTAIL - local processes join the remote queue with a
 * CPU exchange on the remote tail (the design ALock exists to avoid); MUT_NO_VICTIM - the local
 * leader does not write the victim word; MUT_NO_BUDGET - a cohort hands the lock on forever
 * without re-arbitrating (no budget); with TIMEOUTS, MUT_GRANT_NO_CAS - the lock is handed to a
 * waiter with a plain store, blind to its having given up; with RTIMEOUTS, MUT_RGRANT_WRITE -
 * the remote hand-off is an RDMA WRITE (as it was before remote timeouts), and
 * MUT_RGIVEUP_CPU - the remote waiter gives up with a CPU compare-and-swap of its budget word
 * (atomic against the CPU only, while the granter's RDMA one is a load then a store);
 * MUT_RLINK_BOUND - a remote release whose compare-and-swap of r_tail failed waits for its
 * successor's link only up to a fixed bound, then returns ALOCK_E_PEER (a live successor that
 * is slow to link itself is never handed the lock). Each must give a counter-example.
 * -DKILL: remote process 4 may die (once) at any point but between its enqueue and its link:
 * waiting, handed the lock, as the leader, in its critical section, releasing, handing on. RDMA
 * operations on its memory fail from then on. The recovery of alock.h: r_tail carries a head
 * bit H when its descriptor entered an empty queue, and r_head (the line's word @8, RDMA
 * compare-and-swap only) names the descriptor the lock was last handed to: a granter sets it
 * before its compare-and-swap of the successor's budget, the head clears it when it leaves an
 * empty queue. The table's node (proctype Table) learns of the death, marks it (declared) and
 * releases a dead head at the tail (r_tail from exactly 4 + H, or from 4 when r_head is 4, to
 * empty); a granter whose compare-and-swap fails on a declared dead successor does the same;
 * a waiter whose predecessor is declared dead takes over when the predecessor held the head
 * (it had H when the waiter enqueued, or r_head names it, or r_head names the waiter). One
 * local process, no deadlines (the state space). With two remote processes a dead
 * predecessor always held the head; the case of a dead waiter between two live ones (three
 * remote processes) is argued in alock.h, not checked here. Mutants: MUT_RESET_ANY_TAIL - the
 * table's node empties the queue of any dead tail, head or not (a live holder ahead of it
 * loses the lock); MUT_NO_MARK - the granter does not set r_head (a dead holder that was
 * handed the lock is never released). */

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
#ifdef KILL
#ifdef RTIMEOUTS
#error "KILL models alock_remote_lock without deadlines"
#endif
#define H 8                 /* r_tail's head bit: the tail entered an empty queue (its leader) */
byte r_head;                /* the lock line's word @8: the remote descriptor the lock was last
                               handed to (0: none, or the head entered an empty queue) */
bool dead[5];               /* remote process 4 has died: RDMA operations on its memory fail */
bool declared[5];           /* the table's node has marked it dead (alock_table_remote_dead) */
byte rx_next, rx_serving;   /* rxe's atomic_ops_lock, a fair (ticket) spinlock of three users:
                               the two remote processes and the table's node's loopback link */
#define RX_N 3
#else
bit rx_next, rx_serving;    /* rxe's atomic_ops_lock, a fair (ticket) spinlock of the two
                               remote processes: an unfair one would let Spin starve one */
#define RX_N 2
#endif
byte incs;                  /* processes in the critical section */
bool want[5];
bool queued[5];             /* a remote process is past its enqueue (its CAS loop succeeded) */
bool freed[5];              /* TIMEOUTS: an abandoned descriptor was passed over and freed */

/* an RDMA compare-and-swap on word w as rxe performs it: lock, load, compare, store, unlock */
inline rxe_cas_on(w, expect, desired, old)
{
    atomic { tk = rx_next; rx_next = (rx_next + 1) % RX_N };
    atomic { rx_serving == tk -> old = w; tk = 0 };
    if
    :: old == expect -> w = desired
    :: else -> skip
    fi;
    rx_serving = (rx_serving + 1) % RX_N
}
inline rxe_cas(expect, desired, old) { rxe_cas_on(r_tail, expect, desired, old) }

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

/* A remote release whose compare-and-swap of r_tail failed waits until its successor has
   linked itself into descriptor w (alock__r_wait_link): a loop of reads of w's next, as long
   as that takes. Its look at the tail's liveness (a READ that fails once that process is gone)
   never fails here: nobody dies. MUT_RLINK_BOUND: the wait gives up after a fixed bound, which
   a live successor may exceed (the release returns ALOCK_E_PEER and its caller stops). */
inline wait_link(w)
{
#ifdef MUT_RLINK_BOUND
    do
    :: next[w] != NONE -> break
    :: next[w] == NONE -> skip                   /* another read */
    :: next[w] == NONE -> goto gave_up           /* the bound passed */
    od
#else
    (next[w] != NONE)
#endif
}

#ifdef RTIMEOUTS
/* hand the lock (budget b) to remote successor `first` as alock__r_grant does: an RDMA CAS of
   its budget WAIT -> b; if it gave up, unlink it (READ next; CAS r_tail; WRITE frees it) */
inline grant_remote(first, b)
{
    s = first; gb = b;
    do
    ::
#ifdef MUT_RGRANT_WRITE
       budget[s] = gb; s = 0; gb = 0; break   /* the mutant: an RDMA WRITE, blind to giving up */
#else
       rxe_cas_on(budget[s], WAIT, gb, old);
       if
       :: old == WAIT -> atomic { old = 0; s = 0; gb = 0 }; break
       :: else ->
          old = 0;
          if
          :: next[s] == NONE ->                 /* RDMA READ of its next */
             rxe_cas(s, NONE, old);
             if :: old == s -> atomic { freed[s] = 1; s = 0 } :: else -> skip fi;
             old = 0
          :: else -> skip
          fi;
          if
          :: s == 0 -> gb = 0; break
          :: else ->
             wait_link(s);                      /* its successor links itself into s */
             n = next[s];
             freed[s] = 1;                      /* RDMA WRITE of its lock word */
             s = n; n = 0
          fi
       fi
#endif
    od
}
#endif

#ifdef KILL
/* Remote process 4 may die here (once): it takes no further step. It may die anywhere but
   between its enqueue and its link (that window stays manual: see alock.h). */
inline die_point()
{
    if
    :: me == 4 -> atomic { dead[me] = 1; goto died }
    :: true -> skip
    fi
}

/* Release the lock for dead remote descriptor s, the head, at the tail as f (s, or s + H when
   it entered an empty queue): an RDMA CAS of r_tail from exactly f to empty; if that worked,
   r_head from s to 0. If a successor has enqueued meanwhile, it takes over instead. */
inline release_dead(s, f)
{
    rxe_cas(f, NONE, old);
    if
    :: old == f -> old = 0; rxe_cas_on(r_head, s, NONE, old)
    :: else -> skip
    fi;
    old = 0
}

/* r_head := x by RDMA CAS, from what it holds (e, our guess; only the head changes it, so what
   else it holds is stale) */
inline mark_head(e, x)
{
    rh = e;
    do
    :: rxe_cas_on(r_head, rh, x, old);
       if :: old == rh -> break :: else -> rh = old fi
    od;
    atomic { rh = 0; old = 0 }
}
#endif

proctype Remote(byte me)
{
    byte pred, old, lt, v;
#ifdef KILL
    byte tk, rh, form;      /* form: our r_tail value, me + H when we entered an empty queue */
    bit ph;                 /* pred held the head when we enqueued behind it (it had H) */
    bit lead;               /* we entered an empty queue: r_head does not name us */
#else
    bit tk;
#endif
#ifdef RTIMEOUTS
    byte s, n, gb;
#endif
again:
    atomic { want[me] = 1; budget[me] = WAIT; next[me] = NONE; pred = NONE };
    do                                           /* swap emulated with a CAS loop */
#ifdef KILL
    :: form = (pred == NONE -> me + H : me); rxe_cas(pred, form, old);
#else
    :: rxe_cas(pred, me, old);
#endif
       if :: old == pred -> break :: else -> pred = old fi
    od;
#ifdef KILL
    atomic {
        old = 0; queued[me] = 1; lead = (pred == NONE);
        ph = (pred >= H); if :: pred >= H -> pred = pred - H :: else -> skip fi
    };
#else
    atomic { old = 0; queued[me] = 1 };
#endif
    if
    :: pred != NONE ->
#ifdef KILL
        /* the link: an RDMA CAS into pred's descriptor, which fails if pred is dead (then we
           wait all the same) */
        atomic { if :: !dead[pred] -> next[pred] = me :: else -> skip fi };
        die_point();                             /* dies waiting */
        do
        :: budget[me] != WAIT -> break           /* spins on its own memory */
        :: declared[pred] ->                     /* every check_ms: READ of the dead map... */
           rh = r_head;                          /* ...then of the line */
           if
           :: ph || rh == pred || rh == me ->    /* pred held the head, or handed it to us */
              mark_head(rh, me);                 /* take over */
              budget[me] = 0; break
           :: else -> rh = 0
           fi
        od;
        atomic { pred = 0; ph = 0; lead = 0; form = me };
        die_point();                             /* dies handed the lock, not entered */
#else
        atomic { next[pred] = me; pred = 0 };    /* RDMA WRITE into pred's descriptor */
#endif
#ifdef RTIMEOUTS
        do
        :: budget[me] != WAIT -> break           /* spins on its own memory */
        ::                                       /* the deadline passed: give up */
#ifdef MUT_RGIVEUP_CPU
           atomic { old = budget[me]; if :: old == WAIT -> budget[me] = ABANDONED :: else -> skip fi };
#else
           rxe_cas_on(budget[me], WAIT, ABANDONED, old);
#endif
           if
           :: old == WAIT ->
              atomic { old = 0; want[me] = 0; queued[me] = 0 };
              (freed[me]);   /* one descriptor per process here: wait until it is passed over */
              freed[me] = 0;
              goto again
           :: else -> old = 0; break              /* handed the lock meanwhile */
           fi
        od;
#else
        (budget[me] != WAIT);                    /* spins on its own memory */
#endif
        if
        :: budget[me] > 0 -> goto cs
        :: else -> budget[me] = BUDGET
        fi
    :: else -> budget[me] = BUDGET
    fi;
#ifdef KILL
    die_point();                                 /* dies as the cohort's leader */
#endif
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
#ifdef RTIMEOUTS
        :: atomic { lt = 0; v = 0 };             /* the deadline passed: leave the head */
           if
           :: next[me] == NONE ->
              rxe_cas(me, NONE, old);
              if :: old == me -> atomic { old = 0; want[me] = 0; queued[me] = 0 }; goto again
                 :: else -> old = 0 fi;
              wait_link(me)
           :: else -> skip
           fi;
           grant_remote(next[me], 0);
           atomic { want[me] = 0; queued[me] = 0 };
           goto again
#endif
        od
    fi;
    atomic { lt = 0; v = 0 };
cs:
    crit(me);
#ifdef KILL
    die_point();                                 /* dies in its critical section */
    if
    :: next[me] == NONE ->
        rxe_cas(form, NONE, old);
        if
        :: old == form ->
           old = 0;
           if
           :: !lead -> die_point(); rxe_cas_on(r_head, me, NONE, old); old = 0
           :: else -> skip
           fi;
           goto again
        :: else -> old = 0
        fi;
        die_point();                             /* dies waiting for its successor's link */
        wait_link(me)
    :: else -> skip
    fi;
    /* the hand-off: r_head := the successor, then the RDMA CAS of its budget, WAIT -> b */
#ifndef MUT_NO_MARK
    mark_head((lead -> NONE : me), next[me]);
#endif
    die_point();                                 /* dies handing the lock on */
    if
    :: atomic { !dead[next[me]] -> budget[next[me]] = budget[me] - 1 }
    :: atomic { dead[next[me]] -> skip };        /* the CAS fails: the successor is dead */
       if :: declared[next[me]] -> release_dead(next[me], next[me]) :: else -> skip fi
    fi;
    goto again;
died:
    skip
#else
    /* alock_remote_unlock (alock__r_unlink_head): read our next (our own memory); if empty,
       the RDMA compare-and-swap of r_tail from us to empty; if that fails, a successor has
       enqueued: wait for its link; then the hand-off */
    if
    :: next[me] == NONE ->
        rxe_cas(me, NONE, old);
        if :: old == me -> old = 0; goto again :: else -> old = 0 fi;
        wait_link(me)
    :: else -> skip
    fi;
#ifdef RTIMEOUTS
    grant_remote(next[me], budget[me] - 1);      /* RDMA CAS of the successor's budget */
#else
    pass_on(me);  /* alock.h's RDMA CAS of the successor's budget, WAIT -> b: nobody gives up
                     here, so it always succeeds, as the store modelled here does */
#endif
    goto again
#ifdef MUT_RLINK_BOUND
gave_up:                                         /* ALOCK_E_PEER: the caller stops */
    atomic { want[me] = 0; queued[me] = 0 }
#endif
#endif /* KILL */
}

#ifdef KILL
/* The table's node: it learns that remote process 4 died (krconn), marks it dead (a full
   barrier), then looks at the line with CPU loads: a dead head at the tail (it entered an empty
   queue, or r_head names it) is released with release_dead through its loopback link. */
proctype Table()
{
    byte rt, rh, old, tk;
    (dead[4]);
    declared[4] = 1;
    rt = r_tail; rh = r_head;
    if
#ifdef MUT_RESET_ANY_TAIL
    :: rt == 4 + H || rt == 4 -> release_dead(4, rt)      /* the mutant: any dead tail */
#else
    :: rt == 4 + H || (rt == 4 && rh == 4) -> release_dead(4, rt)
#endif
    :: else -> skip
    fi
}
#endif

init
{
    atomic {
#ifdef KILL
        run Local(1); run Remote(3); run Remote(4); run Table()  /* one local process */
#else
        run Local(1); run Local(2); run Remote(3); run Remote(4)
#endif
    }
}

ltl local_gets_lock { [] (want[1] -> <> !want[1]) }
/* A remote process that has enqueued gets the lock. Before that it may not: verbs has no swap,
   and the compare-and-swap loop that stands in for one is lock-free, not starvation-free (another
   remote process can win every race); remote_gets_lock gives that counter-example. */
ltl remote_queued_gets_lock { [] (queued[3] -> <> !queued[3]) }
ltl remote_gets_lock { [] (want[3] -> <> !want[3]) }
