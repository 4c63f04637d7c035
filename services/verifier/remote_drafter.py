"""The verifier's drafter client: a Drafter whose proposals come from drafter replicas over gRPC."""

from __future__ import annotations

import itertools
import logging
import threading
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from treespec.shared.drafting.drafter import Drafter, DraftQuery
from treespec.shared.drafting.features import FeatureRing, FeatureSlots
from treespec.shared.drafting.token_tree import TokenTree
from treespec.shared.rpc.tree_codec import budget_to_proto, tree_from_proto
from treespec.v1 import drafter_pb2
from treespec.verifier.draft_round import PendingRound
from treespec.verifier.drafter_link import Backoff, DraftLink, ReplicaLink
from treespec.verifier.drafter_targets import DrafterTargets, local_socket_path
from treespec.verifier.local_link import LocalLink
from treespec.verifier.replica_pace import Ask, PacePolicy, ReplicaPace

log = logging.getLogger(__name__)


@dataclass
class _Track:
    tokens: list[int]  # prompt + every committed token: enough to reopen the request anywhere
    trace_context: dict[str, str]
    cache_salt: str = ""
    link: DraftLink | None = None  # the live replica drafting it; None while no replica is up


class FeatureRingSource(Protocol):
    """Where co-located drafters read the target's features (a ColocationServer)."""

    @property
    def feature_ring(self) -> FeatureRing | None: ...


class RemoteDrafter(Drafter):
    """Used by the engine thread through the synchronous Drafter API; never raises into it.

    Each request lives on one replica (the least loaded when it opens). open/commit/close only queue
    messages. `propose` asks each replica for its requests' trees in a new round and waits until
    `deadline_s`: what is missing then, or arrives for an older round, means plain decoding. When a
    replica's stream breaks, its requests are reopened on the others from their full history, and
    the replica is reconnected in the background, to take new requests once it is back. A replica
    that stays up but keeps missing the deadline is not waited on (`pace`, see replica_pace.py): its
    requests move to a replica that keeps pace, or else decode plainly, and it gets probe rounds, not
    waited on, until it answers one in time.

    `features`: for co-located replicas that read the target's features (EAGLE), the ring they
    asked the verifier for; the engine publishes into it and each Advance carries the slots.
    """

    def __init__(
        self,
        targets: list[str] | str,
        deadline_s: float = 0.05,
        resolve_interval_s: float = 10.0,
        backoff: Backoff | None = None,
        features: FeatureRingSource | None = None,
        pace: PacePolicy | None = None,
    ) -> None:
        self.deadline_s = deadline_s
        self._pace = ReplicaPace(pace or PacePolicy())
        self._features = features
        self._targets = DrafterTargets.parse(targets)
        self._resolve_interval_s = resolve_interval_s
        self._backoff = backoff
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # notified when a replica comes or goes
        self._links: dict[str, DraftLink] = {}
        self._live: list[DraftLink] = []
        self._tracks: dict[str, _Track] = {}
        self._pending: PendingRound | None = None
        self._rounds = itertools.count(1)
        self._stopping = threading.Event()
        self._warned: set[str] = set()
        self._resolver = threading.Thread(target=self._resolve_loop, name="drafter-resolver", daemon=True)
        self._refresh()
        if self._targets.dynamic:
            self._resolver.start()

    # ---- the Drafter API (engine thread) -------------------------------------------------------

    def open(
        self,
        request_id: str,
        prompt: Sequence[int],
        trace_context: Mapping[str, str] | None = None,
        cache_salt: str = "",
    ) -> None:
        with self._lock:
            self._drop(request_id)
            track = _Track(list(prompt), dict(trace_context or {}), cache_salt)
            self._tracks[request_id] = track
            self._assign(request_id, track, self._loads())

    def commit(self, request_id: str, tokens: Sequence[int], features: FeatureSlots | None = None) -> None:
        with self._lock:
            track = self._tracks.get(request_id)
            if track is None or not tokens:
                return
            track.tokens.extend(tokens)
            if track.link is not None:
                advance = drafter_pb2.AdvanceDraft(request_id=request_id, token_ids=list(tokens))
                if features is not None:
                    advance.features.start = features.start
                    advance.features.slots.extend(features.slots)
                track.link.send(drafter_pb2.DraftRequest(advance=advance))

    def close(self, request_id: str) -> None:
        with self._lock:
            self._drop(request_id)

    def propose(self, queries: Sequence[DraftQuery]) -> list[TokenTree | None]:
        pending = self._start_round(queries)
        if pending is None:
            return [None] * len(queries)
        pending.done.wait(self.deadline_s)
        with self._lock:
            self._pending = None  # from now on, replies for this round are late
            self._keep_pace(pending)
        return [_tree(pending.results.get(q.request_id)) for q in queries]

    @property
    def feature_ring(self) -> FeatureRing | None:
        """The co-located drafters' ring, once one of them asked for features."""
        return self._features.feature_ring if self._features is not None else None

    # ---- lifecycle and introspection ----------------------------------------------------------

    def close_all(self) -> None:
        """Close every open request on its replica (the engine is going away)."""
        with self._lock:
            for request_id in list(self._tracks):
                self._drop(request_id)

    def shutdown(self) -> None:
        """close_all, then end every stream and thread. The object is unusable afterwards."""
        self._stopping.set()
        self.close_all()
        if self._resolver.is_alive():
            self._resolver.join()
        with self._lock:
            links = list(self._links.values())
            self._links.clear()
        for link in links:
            link.stop()

    def __enter__(self) -> RemoteDrafter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def live_replicas(self) -> list[str]:
        with self._lock:
            return [link.address for link in self._live]

    def replica_of(self, request_id: str) -> str | None:
        with self._lock:
            track = self._tracks.get(request_id)
            return track.link.address if track is not None and track.link is not None else None

    def wait_for_replicas(self, count: int, timeout_s: float) -> bool:
        """Block until at least `count` replicas are up; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self._live) >= count, timeout_s)

    # ---- LinkListener (replica threads) --------------------------------------------------------

    def link_up(self, link: DraftLink) -> None:
        with self._changed:
            if self._links.get(link.address) is not link or link in self._live:
                return
            self._live.append(link)
            self._warned.discard("none")
            loads = self._loads()
            for request_id, track in self._tracks.items():
                if track.link is None:
                    self._assign(request_id, track, loads)
            self._changed.notify_all()

    def link_down(self, link: DraftLink) -> None:
        with self._changed:
            if link in self._live:
                self._live.remove(link)
            self._pace.forget(link)
            if self._pending is not None:
                self._pending.forget(link)
            loads = self._loads()
            for request_id, track in self._tracks.items():
                if track.link is link:
                    track.link = None
                    self._assign(request_id, track, loads)
            self._changed.notify_all()

    def link_reply(self, link: DraftLink, reply: drafter_pb2.DraftReply) -> None:
        with self._lock:
            accepted = self._pending is not None and self._pending.accept(link, reply)
            if not accepted:
                self._pace.replied(link, reply.round, self.deadline_s, link.address)
        if not accepted:
            log.debug("dropping a late or probe reply (round %d) from %s", reply.round, link.address)

    # ---- internals ---------------------------------------------------------------------------------

    def _start_round(self, queries: Sequence[DraftQuery]) -> PendingRound | None:
        with self._lock:
            grouped: dict[DraftLink, list[DraftQuery]] = {}
            for query in queries:
                track = self._tracks.get(query.request_id)
                if track is not None and track.link is not None:
                    grouped.setdefault(track.link, []).append(query)
            # A lagging replica's requests get no tree: it is probed (asked, not waited on) or skipped.
            asks = {link: self._pace.ask(link) for link in grouped}
            probed = [link for link in grouped if asks[link] is Ask.PROBE]
            waited = {link: asked for link, asked in grouped.items() if asks[link] is Ask.WAIT}
            if not probed and not waited:
                return None
            number = next(self._rounds)
            for link in probed:
                link.send(_propose_message(number, grouped[link]))
                self._pace.probe_sent(link, number)
            if not waited:
                return None
            owed: dict[Hashable, set[str]] = {
                link: {q.request_id for q in asked} for link, asked in waited.items()
            }
            self._pending = PendingRound(number, owed)
            for link, asked in waited.items():
                link.send(_propose_message(number, asked))
            return self._pending

    def _keep_pace(self, pending: PendingRound) -> None:
        """After a round's wait: count who missed it; a replica that just turned lagging hands its
        requests to the replicas that keep pace, if there are any."""
        late = set(pending.late())
        for link in pending.asked:
            assert isinstance(link, DraftLink)
            if link not in late:
                self._pace.answered(link, link.address)
            elif self._pace.missed(link, link.address):
                self._move_off(link)

    def _move_off(self, link: DraftLink) -> None:
        if all(self._pace.lagging(other) for other in self._live):
            return  # nowhere better: its requests stay, and decode plainly while it lags
        loads = self._loads()
        for request_id, track in self._tracks.items():
            if track.link is link:
                link.send(drafter_pb2.DraftRequest(close=drafter_pb2.CloseDraft(request_id=request_id)))
                loads[link] -= 1
                self._assign(request_id, track, loads)

    def _assign(self, request_id: str, track: _Track, loads: Counter[DraftLink]) -> None:
        """To the live replica with the fewest requests, among those keeping pace if any do; it learns
        the request's full history. Callers of _assign, _drop and _loads hold the lock."""
        candidates = [link for link in self._live if not self._pace.lagging(link)] or self._live
        link = min(candidates, key=lambda candidate: loads[candidate], default=None)
        track.link = link
        if link is None:
            self._warn_once("none", "no drafter replica is up: decoding plainly until one is")
            return
        loads[link] += 1
        message = drafter_pb2.OpenDraft(
            request_id=request_id,
            token_ids=track.tokens,
            trace_context=track.trace_context,
            cache_salt=track.cache_salt,
        )
        link.send(drafter_pb2.DraftRequest(open=message))

    def _drop(self, request_id: str) -> None:
        track = self._tracks.pop(request_id, None)
        if track is not None and track.link is not None:
            close = drafter_pb2.CloseDraft(request_id=request_id)
            track.link.send(drafter_pb2.DraftRequest(close=close))

    def _loads(self) -> Counter[DraftLink]:
        return Counter(t.link for t in self._tracks.values() if t.link is not None)

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message)

    # ---- replica discovery ----------------------------------------------------------------------

    def _resolve_loop(self) -> None:
        while not self._stopping.wait(self._resolve_interval_s):
            self._refresh()

    def _refresh(self) -> None:
        """Start links to new addresses, stop those to vanished ones (their requests move)."""
        try:
            addresses = self._targets.resolve()
        except OSError as exc:  # keep the replicas we know; DNS may come back
            with self._lock:
                self._warn_once("resolve", f"cannot resolve drafter replicas: {exc}")
            return
        with self._lock:
            if self._stopping.is_set():
                return
            self._warned.discard("resolve")
            for address in addresses:
                if address not in self._links:
                    self._links[address] = _link(address, self, self._backoff)
                    self._links[address].start()
            gone = [self._links.pop(a) for a in list(self._links) if a not in addresses]
        for link in gone:
            link.stop()


def _link(address: str, listener: RemoteDrafter, backoff: Backoff | None) -> DraftLink:
    """Over a co-located drafter's local socket (`local:PATH`), else over gRPC."""
    if local_socket_path(address) is not None:
        return LocalLink(address, listener, backoff)
    return ReplicaLink(address, listener, backoff)


def _propose_message(number: int, queries: Sequence[DraftQuery]) -> drafter_pb2.DraftRequest:
    items = [
        drafter_pb2.ProposeItem(request_id=q.request_id, budget=budget_to_proto(q.budget)) for q in queries
    ]
    return drafter_pb2.DraftRequest(propose=drafter_pb2.ProposeDrafts(round=number, items=items))


def _tree(result: drafter_pb2.DraftResult | None) -> TokenTree | None:
    """The draft stage validates trees; here only decoding can fail (then: no tree)."""
    if result is None or not result.HasField("tree"):
        return None
    try:
        return tree_from_proto(result.tree)
    except (ValueError, TypeError, RuntimeError):
        return None
