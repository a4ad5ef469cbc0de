/*
 * The turnstile's lock protocol (package lock and its callers), as a
 * Promela model for the spin model checker.
 *
 * Each inline below with a Lock method's name is that method, step for
 * step, with its mutex held as an atomic block; lock/model_test.go checks
 * that the names, the states and the exclusive kinds match the Go code. The world around the
 * lock is abstracted to what decides whether the GPU is shared: whether
 * Ollama has a model loaded (or loading), whether ComfyUI runs a job,
 * whether it keeps models after one.
 *
 * Processes: NLLM LLM requests, one image requester, one hold requester,
 * optionally a presence requester (lock.PresenceHold: a hold that queues
 * ahead of the image jobs and external holds), and the warm-up after
 * exclusive use. Each may be cancelled while it waits (a client that goes
 * away); upstream steps may fail.
 *
 * Build-time switches:
 *   -DMAX_STREAK=N          the fairness option max_image_streak (0: off)
 *   -DPRESENCE=N            add a presence requester that makes N requests,
 *                           then stops, also without FINITE (three endless
 *                           exclusive requesters make too many states)
 *   -DHOLD_IS_PRESENCE      the hold requester asks for presence holds
 *                           instead, endlessly unless FINITE
 *   -DFINITE                each requester makes ROUNDS requests, then stops
 *   -DLIVE                  LLM request 0 and the image requester never give
 *                           up (for the liveness properties)
 *   -DBUG_RELEASE_ON_PROMPT the lock is given back when /prompt answers
 *   -DBUG_SKIP_DEBT         a hand-over forgets the free it owes
 *   -DBUG_WARM_UNLOCKED     the warm-up runs without holding the lock
 *   -DBUG_PRESENCE_BACK     a presence hold queues at the back, like any hold
 *   -DBUG_PRESENCE_TURN     a presence hold waits for a shared turn that is due
 *   -DBESIDE                LLM requests may also ask to run beside an image
 *                           job (co_resident), admitted when the job's
 *                           workflow is measured (fits beside it); an image
 *                           job of a measured workflow may keep a loaded
 *                           model beside it when the LLM engines are emptied
 *   -DBUG_BESIDE_STALE      that check is made before the lock's step, not in
 *                           it: it may judge a job that has ended
 *   -DBUG_KEEP_UNMEASURED   a model is kept through any image job, its
 *                           workflow measured or not
 */

mtype = { idle, llm, image, hold };     /* lock.States, in order */

#ifndef NLLM
#define NLLM 2
#endif
#ifndef MAX_STREAK
#define MAX_STREAK 0
#endif
#ifndef ROUNDS
#define ROUNDS 2
#endif
#ifdef FINITE
#define FINITE_ROUNDS ROUNDS
#else
#define FINITE_ROUNDS 0
#endif
#ifdef LIVE
#define PATIENT 1
#else
#define PATIENT 0
#endif
/* The exclusive requesters, one per lock.Kind (lock/model_test.go checks
   the names against the Go code's kinds): */
#define image_req    0                   /* lock.ImageJob */
#define hold_req     1                   /* lock.ExternalHold */
#define presence_req 2                   /* lock.PresenceHold */
#if defined(HOLD_IS_PRESENCE)
#define PRES        hold_req             /* the presence requester: the hold requester, */
#define NEXCL       2
#define PRES_ROUNDS FINITE_ROUNDS        /* as many requests as the others */
#elif defined(PRESENCE)
#define PRES        presence_req         /* a third requester, */
#define NEXCL       3
#define PRES_ROUNDS PRESENCE             /* PRESENCE requests */
#else
#define PRES        presence_req         /* none (NEXCL <= PRES) */
#define NEXCL       2
#define PRES_ROUNDS 0
#endif

/* --- the lock's state (lock.Lock's fields) --- */
byte  shared = 0;                        /* shared holders */
byte  beside = 0;                        /* of which admitted beside the image job */
mtype excl = idle;                       /* the exclusive holder's kind */
bool  freeing = false;                   /* a Free runs for the last exclusive holder */
bool  owes = false;                      /* ComfyUI may hold a previous job's models */
byte  streak = 0;                        /* exclusive grants in a row while shared waiters waited;
                                            saturates at MAX_STREAK, the only value the policy compares */
byte  sharedQ = 0;                       /* shared waiters */
bool  sWaiting[NLLM];                    /* which LLM requests wait (the gate's waiters) */
bool  admitted[NLLM];                    /* the gate was opened for them */
byte  starved0 = 0;                      /* grants of image jobs and external holds while
                                            LLM request 0 waits */
byte  q[NEXCL];                          /* exclusive waiters: presence first, then FIFO */
byte  qlen = 0;
byte  npres = 0;                         /* presence waiters, q[0 .. npres-1] (qKinds[PresenceHold]) */
bool  granted[NEXCL];
mtype kindOf[NEXCL];

/* --- the world --- */
bool ollamaLoaded = false;               /* Ollama has a model loaded or loading */
bool comfyRunning = false;               /* ComfyUI runs a job */
bool comfyLoaded = false;                /* ComfyUI keeps a job's models */
byte inExcl = 0;                         /* exclusive holders past their grant */
bool warmReq = false;                    /* an exclusive release asked for a warm-up */
bool besideLoaded = false;               /* Ollama has a model loaded beside an image job */
bool jobMeasured = false;                /* the running image job's workflow peak is known:
                                            a co-resident model fits beside it */

/* for the liveness properties */
bool llmWaiting[NLLM];
bool exclWaiting[NEXCL];

/* for presenceFirst: imgPassed, the image requester was queued when the
   presence waiter arrived; overtaken, it was granted before it. */
bool imgPassed = false;
bool overtaken = false;

#define sharedFree     (excl == idle && !freeing && qlen == 0)
#define turnDue        (MAX_STREAK > 0 && sharedQ > 0 && streak >= MAX_STREAK)
#ifndef BUG_PRESENCE_TURN
#define exclusiveTurn  (npres > 0 || !turnDue)      /* presence goes first regardless */
#else
#define exclusiveTurn  (!turnDue)
#endif
#define isPresence(id) (NEXCL > PRES && id == PRES)
#define limit          (isPresence(id) -> PRES_ROUNDS : FINITE_ROUNDS)   /* requests, 0: endless */
#define gpuShared      (ollamaLoaded && (comfyRunning || comfyLoaded))
/* Over-committed: a model runs beside a job whose peak was not known to
   leave room for it. */
#define overCommitted  (besideLoaded && comfyRunning && !jobMeasured)
#ifdef BUG_KEEP_UNMEASURED
#define KEEP_OK        true
#else
#define KEEP_OK        jobMeasured
#endif

inline addShared() { shared++ }

/* admitSharedWaiters: the shared turn never comes ahead of a presence
   waiter. */
inline admitSharedWaiters() {
	assert(npres == 0);
	shared = shared + sharedQ;
	sharedQ = 0;
	streak = 0;
	k = 0;
	do
	:: k < NLLM -> if :: sWaiting[k] -> sWaiting[k] = false; admitted[k] = true :: else -> skip fi; k++
	:: else -> k = 0; break
	od;
	starved0 = 0
}

inline grantExclusive(w) {
	excl = kindOf[w];
	if
	:: sharedQ > 0 && streak < MAX_STREAK -> streak++
	:: else -> skip
	fi;
	if
	:: sWaiting[0] && !isPresence(w) && starved0 <= MAX_STREAK && MAX_STREAK > 0 -> starved0++
	:: else -> skip
	fi;
	if
	:: isPresence(w) -> imgPassed = false
	:: w == image_req && imgPassed -> overtaken = true
	:: else -> skip
	fi;
	granted[w] = true
}

/* enqueue: a presence waiter goes behind the presence waiters at the
   front, any other at the back. */
inline enqueue(id) {
	if
#ifndef BUG_PRESENCE_BACK
	:: isPresence(id) ->
		i = qlen;
		do
		:: i > npres ->
			q[i] = q[i - 1];
			if :: q[i] == image_req -> imgPassed = true :: else -> skip fi;
			i--
		:: else -> break
		od;
		q[npres] = id;
		npres++;
		i = 0
#else
	:: isPresence(id) ->
		i = 0;
		do
		:: i < qlen -> if :: q[i] == image_req -> imgPassed = true :: else -> skip fi; i++
		:: else -> i = 0; break
		od;
		q[qlen] = id
#endif
	:: else -> q[qlen] = id
	fi;
	qlen++
}

/* grantNextExclusive: the first exclusive waiter gets the lock if no
   shared holder is left; done says whether it did. */
inline grantNextExclusive(done) {
	if
	:: qlen > 0 && shared == 0 ->
		w = q[0];
		i = 0;
		do
		:: i + 1 < qlen -> q[i] = q[i + 1]; i++
		:: else -> break
		od;
		qlen--;
		q[qlen] = 0;
		if :: npres > 0 -> npres-- :: else -> skip fi;   /* a presence waiter is first */
		grantExclusive(w);
		w = 0; i = 0;
		done = true
	:: else -> done = false
	fi
}

inline TryAcquireShared(ok) {
	d_step {
		if
		:: sharedFree -> addShared(); ok = true
		:: else -> ok = false
		fi
	}
}

inline AcquireShared(ok) {
	d_step {
		if
		:: sharedFree -> addShared(); ok = true
		:: else -> sharedQ++; sWaiting[me] = true; ok = false
		fi
	}
	if
	:: ok -> skip
	:: else ->
		if
		:: admitted[me] -> admitted[me] = false; ok = true      /* admitted */
		:: cancellable -> d_step {                   /* cancelled */
			if
			:: admitted[me] -> admitted[me] = false; ok = true; cancelAfterGrant = true
			:: else -> sharedQ--; sWaiting[me] = false; ok = false;
				if :: me == 0 -> starved0 = 0 :: else -> skip fi
			fi
		   }
		fi;
		if
		:: cancelAfterGrant -> cancelAfterGrant = false; ReleaseShared(); ok = false
		:: else -> skip
		fi
	fi
}

inline ReleaseShared() {
	d_step {
		assert(shared > 0);
		shared--;
		if
		:: beside > 0 -> beside--                   /* the image job still holds the lock */
		:: else ->
			if
			:: shared == 0 -> grantNextExclusive(done)
			:: else -> skip
			fi
		fi
	}
}

/* TryAcquireBeside: a shared hold beside the image job holding the lock,
   if no free runs, no hold waits, and the caller's check (fits, made under
   the lock's mutex) says the card has room. */
inline TryAcquireBeside(ok) {
#ifdef BUG_BESIDE_STALE
	fitsSeen = jobMeasured;
#endif
	d_step {
		i = 0; k = 0;
		do
		:: i < qlen -> if :: kindOf[q[i]] == hold -> k++ :: else -> skip fi; i++
		:: else -> i = 0; break
		od;
#ifdef BUG_BESIDE_STALE
		if
		:: excl == image && !freeing && k == 0 && fitsSeen -> shared++; beside++; ok = true
		:: else -> ok = false
		fi;
#else
		if
		:: excl == image && !freeing && k == 0 && jobMeasured -> shared++; beside++; ok = true
		:: else -> ok = false
		fi;
#endif
		k = 0
	}
}

inline AcquireExclusive(id, ok) {
	d_step {
		if
		:: shared == 0 && excl == idle && !freeing && qlen == 0 -> grantExclusive(id)
		:: else -> enqueue(id)
		fi
	}
	if
	:: granted[id] -> ok = true
	:: cancellable -> d_step {                        /* cancelled */
		if
		:: granted[id] -> cancelAfterGrant = true
		:: else ->
			i = 0;
			do
			:: i < qlen && q[i] != id -> i++
			:: else -> break
			od;
			if
			:: i < npres -> npres--                  /* a presence waiter leaves */
			:: else -> skip
			fi;
			do
			:: i + 1 < qlen -> q[i] = q[i + 1]; i++
			:: else -> break
			od;
			qlen--;
			q[qlen] = 0;
			i = 0;
			if
			:: isPresence(id) -> imgPassed = false
			:: else -> skip
			fi;
			if
			:: qlen == 0 && excl == idle && !freeing && sharedQ > 0 -> admitSharedWaiters()
			:: else -> skip
			fi
		fi;
		ok = false
	   }
	fi;
	if
	:: cancelAfterGrant -> cancelAfterGrant = false; granted[id] = false; ReleaseExclusive(false, handed)
	:: else -> skip
	fi
}

/* TryAcquireExclusive: AcquireExclusive's immediate grant, or nothing
   (it never queues). */
inline TryAcquireExclusive(id, ok) {
	d_step {
		if
		:: shared == 0 && excl == idle && !freeing && qlen == 0 -> grantExclusive(id); ok = true
		:: else -> ok = false
		fi
	}
}

/* ReleaseExclusive: hand over to the next exclusive waiter (the debt goes
   with it), or pay the debt (Free) and admit the shared waiters. */
inline ReleaseExclusive(jobRan, handed) {
	d_step {
		assert(excl != idle && !freeing);
		owes = owes || jobRan;
		handed = false
	}
	do
	:: d_step {
		if
		:: exclusiveTurn && qlen > 0 && shared == 0 ->
			grantNextExclusive(done);
#ifdef BUG_SKIP_DEBT
			owes = false;
#endif
			handed = true;
			needFree = false
		:: else ->
			if
			:: owes -> freeing = true; needFree = true
			:: else ->
				needFree = false;
				/* the shared turn, judged before the streak is reset */
				done = sharedQ > 0 && !(qlen > 0 && exclusiveTurn);
				excl = idle;
				beside = 0;                          /* ordinary shared holders now */
				streak = 0;
				if
				:: done -> admitSharedWaiters()
				:: else -> grantNextExclusive(done)   /* none while shared holders are left */
				fi
			fi
		fi
	   }
	   if
	   :: handed || !needFree -> break
	   :: else ->
		comfyLoaded = false;                      /* Effects.Free: ComfyUI's free, confirmed */
		d_step { freeing = false; owes = false }
	   fi
	od
}

inline Paid() { owes = false }

/* SetOptions changes MaxExclusiveStreak; the model fixes it at build time. */
inline SetOptions() { skip }

/* --- the requesters --- */

proctype LLMRequest(byte me) {
	bool ok, done, cancelAfterGrant, fitsSeen;
	bool cancellable = !(PATIENT && me == 0);
	byte w, i, k, n = 0;
end:
	do
	:: 
#ifdef FINITE
		n < ROUNDS -> n++;
#endif
		llmWaiting[me] = true;
		if
		:: AcquireShared(ok)
		:: cancellable -> TryAcquireShared(ok)      /* reject mode */
#ifdef BESIDE
		:: cancellable -> TryAcquireBeside(ok);     /* a co-resident model during a job */
			if
			:: ok ->
				llmWaiting[me] = false;
				besideLoaded = true;                 /* it stays loaded until the next emptying */
				ReleaseShared();
				goto nextReq
			:: else -> skip
			fi
#endif
		fi;
		llmWaiting[me] = false;
		if
		:: ok ->
			d_step { ollamaLoaded = true; assert(excl == idle && !freeing) };   /* it stays loaded (keep-alive) */
			ReleaseShared()
		:: else -> skip
		fi;
nextReq:
		skip
#ifdef FINITE
	:: n >= ROUNDS -> break
#endif
	od
}

proctype Exclusive(byte id) {
	bool ok, done, handed, needFree, cancelAfterGrant, jobRan;
	bool cancellable = !(PATIENT && id == 0);
	byte w, i, k, n = 0;
end:
	do
	::
#ifdef FINITE
		n < limit -> n++;
#endif
		exclWaiting[id] = true;
		AcquireExclusive(id, ok);
		exclWaiting[id] = false;
		if
		:: ok ->
			granted[id] = false;
			atomic { inExcl++; assert(inExcl == 1 && shared == 0 && excl == kindOf[id]) };
			jobRan = false;
			if
			:: kindOf[id] == image -> jobMeasured = true   /* its workflow's peak is known */
			:: true                              /* a hold, or a workflow never measured: alone */
			fi;
			/* unloadOllama: confirmed empty, or the job is refused */
			if
			:: d_step { ollamaLoaded = false; besideLoaded = false }
#ifdef BESIDE
			/* planKeep, keptFit: a co_resident model stays loaded beside
			   the job whose peak leaves room for it; the rest is unloaded */
			:: kindOf[id] == image && KEEP_OK && (ollamaLoaded || besideLoaded) ->
				d_step { ollamaLoaded = false; besideLoaded = true }
#endif
			:: true -> goto release                /* unload failed */
			fi;
			if
			:: kindOf[id] == hold ->
				comfyLoaded = false; Paid()        /* a hold frees ComfyUI on entry */
			:: kindOf[id] == image ->
				if
				:: true                              /* the prompt is refused (400): no job */
				:: atomic { comfyRunning = true; comfyLoaded = true; jobRan = true };
#ifdef BUG_RELEASE_ON_PROMPT
					inExcl--;
					ReleaseExclusive(jobRan, handed);
					comfyRunning = false;             /* the job ends later, unguarded */
					goto next;
#endif
					comfyRunning = false            /* the job ends; its models stay */
				fi
			fi;
release:
			jobMeasured = false;
			inExcl--;
			ReleaseExclusive(jobRan, handed);
			if
			:: !handed -> warmReq = true
			:: else -> skip
			fi
		:: else -> skip
		fi;
next:
#ifdef FINITE
		skip
	:: n >= limit -> break
#else
		/* a requester with a limit (the presence requester) stops here */
endStopped:
		d_step { (limit == 0 || n + 1 < limit); n = n + (limit > 0) }
#endif
	od
}

/* The warm-up after exclusive use: a shared holder, so an exclusive
   waiter waits for it instead of unloading a model still loading. */
proctype Warm() {
	bool ok, done;
	byte w, i, k;
end:
	do
	:: warmReq ->
		warmReq = false;
#ifdef BUG_WARM_UNLOCKED
		ollamaLoaded = true
#else
		TryAcquireShared(ok);
		if
		:: ok -> ollamaLoaded = true; ReleaseShared()
		:: else -> skip
		fi
#endif
	od
}

/* With finite requesters, once nobody can move the lock must be idle. */
proctype Quiescence() {
	timeout ->
	assert(shared == 0 && beside == 0 && excl == idle && !freeing && sharedQ == 0 && qlen == 0 && npres == 0 && inExcl == 0)
}

init {
	byte k;
	kindOf[image_req] = image;
	kindOf[hold_req] = hold;
#if NEXCL > PRES
	kindOf[PRES] = hold;                  /* a presence hold is state hold too */
#endif
	atomic {
		k = 0;
		do
		:: k < NLLM -> run LLMRequest(k); k++
		:: else -> break
		od;
		k = 0;
		do
		:: k < NEXCL -> run Exclusive(k); k++
		:: else -> break
		od;
		run Warm();
#ifdef FINITE
		run Quiescence()
#endif
	}
}

/* Safety: the GPU is never used by Ollama and ComfyUI at once, but for a
   model admitted beside a job; LLM holders never coexist with an
   exclusive holder, but for those beside an image job; and a model beside
   a job always has room (the card is never over-committed by what the
   turnstile admitted). */
ltl safe { [] (!gpuShared && !(shared > beside && excl != idle) && !(beside > 0 && excl != image) && !overCommitted) }

/* Liveness under weak fairness: a waiting exclusive requester is served
   (or leaves); with max_image_streak a waiting LLM request is too. */
ltl exclLive { [] (exclWaiting[0] -> <> !exclWaiting[0]) }
ltl llmLive { [] (llmWaiting[0] -> <> !llmWaiting[0]) }

/* Bounded starvation with max_image_streak: a waiting LLM request sees at
   most that many grants of image jobs and external holds before it is
   admitted (presence holds go first regardless). */
ltl bounded { [] (MAX_STREAK == 0 || starved0 <= MAX_STREAK) }

/* Presence first: a presence waiter is granted before the image waiter
   that was queued when it arrived. */
ltl presenceFirst { [] !overtaken }
