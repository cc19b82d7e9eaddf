"""The pull exchange's settings (what a node asks and pulls a round) and its counters.

`swarm.exchange.pull` documents the exchange; its parts (`pull_serve`, `pull_groups`) share
these.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from swarm.exchange.history_sample import DEFAULT_SKETCH
from swarm.exchange.peer_view import DEFAULT_CAPACITY, DEFAULT_SAMPLED_VIEWS, MOST_SAMPLED_VIEWS

HINT_MEMORY = 4096  # blob hashes whose holder hints a node remembers (and senders' misses)


@dataclass(frozen=True)
class PullSettings:
    """How much a node asks and pulls per round (its whole cost; nothing depends on N)."""

    pull_lists: int = 8  # peers asked for their announcements each round
    pull_groups: int = 10  # groups pulled each round (J plus a margin for failures)
    per_peer_cap: int = 2  # of those, at most this many from one sender
    # none of this node's model more than this many versions behind its own (None: any): the
    # batch's `sharing.max_version_lag`, so nothing is pulled that the batch would skip
    max_version_lag: int | None = 1
    keep_rounds: int = 3  # own and pulled groups stay served this many rounds
    # Own groups stay announced this many rounds (at most keep_rounds): a list then names the
    # holders of the previous round's groups, who fetched them after they were first announced.
    announce_rounds: int = 2
    candidate_rounds: int = 1  # announcements stay candidates this many rounds
    fetch_timeout_s: float = 5.0  # one fetch at most
    list_wait_s: float = 0.25  # over libp2p: a round waits this long, once, for lists asked
    fresh_list_s: float = 0.5  # ... and asks again, in the round, lists older than this
    round_budget_s: float = 15.0  # every fetch of a round (view, lists by half of it, groups)
    parallel_fetches: int = 8  # fetches side by side (over libp2p; in memory one at a time)
    unserved_ban_after: int = 8  # announced groups a sender did not serve in a row, then hard
    view_capacity: int = DEFAULT_CAPACITY
    view_sketch: int = DEFAULT_SKETCH  # IDs in the history sample asked peers come from (0: view)
    sampled_views: int = DEFAULT_SAMPLED_VIEWS  # views heard a refresh from the sample's peers
    most_sampled_views: int = MOST_SAMPLED_VIEWS  # ... while they still teach the node new IDs
    max_holders: int = 4  # holder hints kept (and tried) per group
    seed_salt: int = 0  # this node's task seed, hashed with its peer ID into its task stream
    every_group: bool = False  # pull any fresh group, signal or not (an observer records them)
    family: str = ""  # this node's model family, announced with its groups (family_digest)
    same_family: bool = False  # pull only groups announced with this node's family


@dataclass
class PullCounters:
    """What the pull exchange did since the last `take_counters`."""

    cheap_checked: int = 0  # announcements checked, plus pulled groups admitted or refused
    lists_asked: int = 0
    lists_failed: int = 0
    lists_refreshed: int = 0  # lists asked off the round, asked again in it (too old)
    lists_unchanged: int = 0  # lists taken unchanged since the peer's last: not checked again
    announcements_refused: int = 0
    candidates: int = 0
    other_family: int = 0  # announcements skipped: another model family (same_family)
    pulls: int = 0
    pulls_failed: int = 0  # no group admitted: nothing served in time, or refused
    pulls_refused: int = 0  # of those, the announced bytes came and were refused
    pulled_from_holders: int = 0
    pulls_with_holders: int = 0  # pulls for which a holder besides the sender was known
    holder_misses: int = 0  # a hinted holder did not serve the group
    bad_holders: int = 0  # a source served bytes that are not the announced group
    stalled: int = 0  # a sender took a group fetch and sent nothing in time (refused hard)
    unwaited: int = 0  # fetches a round stopped waiting on: no answer within their patience
    late: int = 0  # group fetches of those, taken once they ended (that wave, or a later round)
    lists_s: float = 0.0  # seconds the round spent taking lists (waits, lists asked again)
    pulls_s: float = 0.0  # seconds the round spent pulling groups
    served: int = 0  # own or held groups peers fetched in full from this node
    probes: int = 0  # views fetched off the round (peers not vouched for, or only heard)
    probes_failed: int = 0
    suspended: int = 0  # peers not asked now: they failed to answer (`PeerBackoff`)
    resting: int = 0  # peers not asked for lists now: theirs offered nothing (`ListBackoff`)

    def take(self) -> dict:
        """The counts so far, as a dict; all back to 0."""
        out = asdict(self)
        for f in fields(self):
            setattr(self, f.name, 0)
        return out
