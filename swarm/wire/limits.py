"""The wire's schema versions and size bounds: one set of limits every node uses.

A receiver stricter than a sender would make the sender's messages vanish, so these are
part of the protocol (`docs/PROTOCOL.md`), not settings.
"""

from __future__ import annotations

# 2: groups declare their format bonus; 3: the bonus is earned only by a completion that ends
# with its tagged answer (`swarm.tasks.well_formatted`), so schema-2 claims no longer match.
SCHEMA_VERSION = 3
MANIFEST_SCHEMA_VERSION = 1
NONCE_BYTES = 16

# The gossip message limit of the transport is 1 MiB.
MAX_MESSAGE_BYTES = 512 * 1024  # one gossip message (a batch of groups)
TARGET_MESSAGE_BYTES = 64 * 1024  # batches are cut near this size
MAX_GROUP_BYTES = 256 * 1024  # a group in a gossip message
# A pulled group travels alone over a blob stream, so it may be as large as a real model's:
# 16 completions of 16,384 tokens (5 bytes an id at most) and their text are about 3 MB.
MAX_PULLED_GROUP_BYTES = 4 * 1024 * 1024
MAX_SERVED_GROUP_BYTES = MAX_PULLED_GROUP_BYTES + 128  # a signed group as served
MAX_GROUPS_PER_MESSAGE = 256
MAX_COMPLETIONS = 256
MAX_TEXT_CHARS = 98_304  # one completion (16,384 tokens of about 6 characters) or the question
MAX_NAME_CHARS = 256  # swarm id, sender, model, dataset, hash
MAX_CONFIG_CHARS = 4096
MAX_TOKENS_PER_COMPLETION = 16_384
MAX_COUNT = 2**53  # versions and rounds
REWARD_BOUND = 100.0  # claimed rewards must be finite and within +-this
MAX_FORMAT_BONUS = 1.0  # the same bound as the tasks.format_reward config key
MAX_MANIFEST_BYTES = 2048  # one manifest body (~500 bytes in practice)
MAX_MANIFESTS_PER_MESSAGE = 256  # a trainer's index of the deltas and anchors it serves
MAX_MANIFEST_MESSAGE_BYTES = MAX_MANIFESTS_PER_MESSAGE * (MAX_MANIFEST_BYTES + 96)
MAX_BLOB_KEY_CHARS = 512
MAX_PAYLOAD_BYTES = 1 << 40
MANIFEST_KINDS = ("delta", "anchor")
# 2: an announcement names the signed group exactly as served (`blob_hash` of `[body,
# signature]`, `size` of those bytes), so a holder cannot serve a good body with a bad signature.
ANNOUNCEMENT_SCHEMA_VERSION = 3  # 3: the sender's model family
MAX_FAMILY_CHARS = 64  # an announced model family digest
MAX_ANNOUNCEMENT_BYTES = 4096  # one announcement body (~600 bytes in practice)
MAX_ANNOUNCEMENTS_PER_MESSAGE = 256
MAX_HOLDER_HINTS = 512  # (group, holder) hints in one announcements message
MAX_HINT_ADDRS = 4
MAX_ANNOUNCEMENTS_MESSAGE_BYTES = MAX_ANNOUNCEMENTS_PER_MESSAGE * (MAX_ANNOUNCEMENT_BYTES + 96) + (
    MAX_HOLDER_HINTS * 1024
)
