-- Revisioned memory without per-revision manifest copies (DESIGN 4.1-4.2).
--
-- A revision R's manifest is the set of manifest_items with from_rev <= R < coalesce(to_rev, inf);
-- its changes are the changes rows of R; its counts and canonical bytes are on its revisions row.
-- An append therefore writes O(1) rows per appended entry whatever the memory's size, and any past
-- revision stays exactly reconstructable. Nothing here is ever deleted except request_log rows
-- past retention. tenant_id leads every key and index (single-shard transactions, DESIGN 6), and
-- entry ids compare as bytes (COLLATE "C") because manifests and compaction sort by UTF-8 bytes.

CREATE TABLE memory.memories (
    tenant_id text NOT NULL,
    memory_id uuid NOT NULL DEFAULT gen_random_uuid(),
    memory_ref text NOT NULL,
    -- 0 only inside the transaction of the first write, which creates revision 1.
    head_revision bigint NOT NULL DEFAULT 0 CHECK (head_revision >= 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, memory_id),
    UNIQUE (tenant_id, memory_ref)
);

CREATE TABLE memory.revisions (
    tenant_id text NOT NULL,
    memory_id uuid NOT NULL,
    revision bigint NOT NULL CHECK (revision >= 1),
    operation text NOT NULL
        CHECK (operation IN ('append', 'revise', 'forget', 'reactivate', 'organize', 'compact')),
    created_at timestamptz NOT NULL DEFAULT now(),
    change_count integer NOT NULL CHECK (change_count >= 1),
    -- Stored per revision so capacity at any revision is one row read, never a manifest scan.
    active_count integer NOT NULL CHECK (active_count >= 0),
    inactive_count integer NOT NULL CHECK (inactive_count >= 0),
    manifest_bytes bigint NOT NULL CHECK (manifest_bytes > 0),
    PRIMARY KEY (tenant_id, memory_id, revision),
    FOREIGN KEY (tenant_id, memory_id) REFERENCES memory.memories (tenant_id, memory_id)
);

CREATE TABLE memory.changes (
    tenant_id text NOT NULL,
    memory_id uuid NOT NULL,
    revision bigint NOT NULL,
    entry_id text COLLATE "C" NOT NULL,
    op text NOT NULL CHECK (op IN ('add', 'revise', 'deactivate', 'reactivate', 'compact')),
    from_entry_version_id text COLLATE "C",
    to_entry_version_id text COLLATE "C",
    reason text,
    -- A revision names an entry at most once (the canonical changes array is keyed by entry_id).
    PRIMARY KEY (tenant_id, memory_id, revision, entry_id),
    FOREIGN KEY (tenant_id, memory_id, revision)
        REFERENCES memory.revisions (tenant_id, memory_id, revision)
);

CREATE TABLE memory.entry_versions (
    tenant_id text NOT NULL,
    memory_id uuid NOT NULL,
    entry_version_id text COLLATE "C" NOT NULL,
    entry_id text COLLATE "C" NOT NULL,
    version integer NOT NULL CHECK (version >= 1),
    previous_version_id text COLLATE "C",
    kind text NOT NULL,
    -- Already redacted (SR-1): secret values never reach this table.
    content text NOT NULL,
    tags text[] NOT NULL,
    metadata jsonb NOT NULL,
    content_hash text NOT NULL,
    created_in_revision bigint NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz,
    -- Sizes in every ListMemory unit, computed once at write: the read path never tokenizes.
    size_o200k integer NOT NULL CHECK (size_o200k >= 0),
    size_cl100k integer NOT NULL CHECK (size_cl100k >= 0),
    size_chars integer NOT NULL CHECK (size_chars >= 0),
    PRIMARY KEY (tenant_id, memory_id, entry_version_id),
    UNIQUE (tenant_id, memory_id, entry_id, version),
    FOREIGN KEY (tenant_id, memory_id, created_in_revision)
        REFERENCES memory.revisions (tenant_id, memory_id, revision)
);

CREATE TABLE memory.manifest_items (
    tenant_id text NOT NULL,
    memory_id uuid NOT NULL,
    entry_id text COLLATE "C" NOT NULL,
    entry_version_id text COLLATE "C" NOT NULL,
    entry_content_hash text NOT NULL,
    state text NOT NULL CHECK (state IN ('active', 'inactive')),
    -- Whether the item's version carries tags: tagged tombstones are never compacted.
    has_tags boolean NOT NULL,
    -- The revision that last added, deactivated or reactivated the entry (compaction age).
    last_state_change_revision bigint NOT NULL,
    from_rev bigint NOT NULL,
    -- NULL while the item is in the head manifest; set when a later revision replaces or drops it.
    to_rev bigint CHECK (to_rev IS NULL OR to_rev > from_rev),
    PRIMARY KEY (tenant_id, memory_id, entry_id, from_rev),
    FOREIGN KEY (tenant_id, memory_id, entry_version_id)
        REFERENCES memory.entry_versions (tenant_id, memory_id, entry_version_id)
);

-- The head manifest: at most one open range per entry.
CREATE UNIQUE INDEX manifest_items_head
    ON memory.manifest_items (tenant_id, memory_id, entry_id) WHERE to_rev IS NULL;

-- Compaction candidates of the head, counted on every write response.
CREATE INDEX manifest_items_head_tombstones
    ON memory.manifest_items (tenant_id, memory_id, last_state_change_revision)
    WHERE to_rev IS NULL AND state = 'inactive' AND NOT has_tags;

-- Request-id idempotency (servicekit.idempotency): the response stored with the effect.
CREATE TABLE memory.request_log (
    tenant_id text NOT NULL,
    request_id text NOT NULL,
    fingerprint bytea NOT NULL,
    response bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, request_id)
);
