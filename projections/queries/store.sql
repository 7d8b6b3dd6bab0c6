-- name: query_rollouts
-- Rollouts matching Agent Lightning's filters (and/or), with their folded state; one page plus the total.
-- The filters, the count and the page's pick read `rollouts` alone; the page is picked by ORDER BY ... LIMIT (DuckDB's
-- Top-N), not numbered by a window over every matching row, and only its rows' states are read, found by the key's
-- index (a join whose up to 2048 keys DuckDB looks up by index: `dynamic_or_filter_threshold`, projector.limits()).
-- A listing of finished rollouts then reads 64 states, not a million (docs/store-queries.md).
-- Every rollout has its state: the projector writes both rows from the same folds in the same commit (`rollout_rows`
-- and `state_rows` in rollouts.sql, from rows.fold_tables), so the count needs no join with `rollout_states`.
-- An id list that must hold (and) is also a plain filter of `rollouts`, which DuckDB answers from its key's index:
-- an algorithm's poll of its rollouts in flight reads those, and their states by the page's join.
WITH conditions AS (
    SELECT
        *,
        CASE WHEN $use_status_in THEN list_contains($status_in, status) END AS by_status,
        CASE WHEN $use_rollout_id_in THEN list_contains($rollout_id_in, rollout_id) END AS by_ids,
        CASE WHEN $use_rollout_id_contains THEN contains(rollout_id, $rollout_id_contains) END AS by_contains
    FROM rollouts
    WHERE NOT ($use_rollout_id_in AND $logic = 'and') OR list_contains($rollout_id_in, rollout_id)
),

matching AS (
    SELECT * FROM conditions
    WHERE CASE
        WHEN $logic = 'or'
            THEN $no_filter OR coalesce(by_status, FALSE) OR coalesce(by_ids, FALSE) OR coalesce(by_contains, FALSE)
        ELSE coalesce(by_status, TRUE) AND coalesce(by_ids, TRUE) AND coalesce(by_contains, TRUE)
    END
),

-- the order ends with the rollout id (unique): the Top-N's rows, numbered again, keep their places among all matches
page AS (
    SELECT rollout_id, last_seq, $offset + row_number() OVER (ORDER BY {order}) AS page_position
    FROM (SELECT * FROM matching ORDER BY {order} LIMIT $limit OFFSET $offset)
),

page_states AS (
    SELECT rollout_states.state, page.last_seq, page.page_position
    FROM page
    JOIN rollout_states USING (rollout_id)
),

totals AS (
    SELECT count(*) AS total FROM matching
),

final AS (
    SELECT page_states.*, totals.total FROM totals LEFT JOIN page_states ON TRUE
    ORDER BY page_states.page_position
)

SELECT * FROM final;

-- name: wave_states
-- The stored folds of $rollout_ids and the control position they are exact as of, read in one snapshot.
-- A store client answers a wave of wait_for_rollouts from them (services/clients/store/coldwave.py): one query, not
-- one history read per rollout. A rollout's last_seq is that of its last control message applied, or later quarantined
-- (refused or undecodable: the log's own fold skips those, and counts them), as the log's fold gives it. One row per
-- rollout found; one with no rollout when none is. A projection that found the control log replaced (a divergence:
-- it no longer applies that stream) answers no checkpoint.
WITH position AS (
    SELECT max(seq) AS checkpoint FROM checkpoints
    WHERE stream = 'control' AND NOT EXISTS (SELECT 1 FROM divergences WHERE stream = 'control')
),

-- the id list filters both tables: a join filtered on one side only read every state
found AS (
    SELECT picked.rollout_id, picked.last_seq, picked_states.state
    FROM (SELECT rollout_id, last_seq FROM rollouts WHERE list_contains($rollout_ids, rollout_id)) AS picked
    JOIN (SELECT * FROM rollout_states WHERE list_contains($rollout_ids, rollout_id)) AS picked_states
        USING (rollout_id)
),

parked AS (
    SELECT split_part(subject[length($rollout_prefix) + 1:], '.', 1) AS rollout_id, max(seq) AS last_seq
    FROM quarantine
    WHERE stream = 'control' AND starts_with(subject, $rollout_prefix)
    GROUP BY 1
),

final AS (
    SELECT
        position.checkpoint,
        found.rollout_id,
        found.state,
        greatest(found.last_seq, parked.last_seq) AS last_seq
    FROM position
    LEFT JOIN found ON TRUE
    LEFT JOIN parked ON found.rollout_id = parked.rollout_id
)

SELECT * FROM final;

-- name: query_attempts
-- Attempts of one rollout; one page plus the total.
WITH matching AS (
    SELECT * FROM attempts WHERE rollout_id = $rollout_id
),

page AS (
    SELECT *, row_number() OVER (ORDER BY {order}) AS page_position FROM matching
    ORDER BY page_position
    LIMIT $limit OFFSET $offset
),

totals AS (
    SELECT count(*) AS total FROM matching
),

final AS (
    SELECT page.*, totals.total FROM totals LEFT JOIN page ON TRUE
    ORDER BY page.page_position
)

SELECT * FROM final;

-- name: query_spans
-- Spans of a rollout (one attempt, the latest, or all) matching the name/id filters (and/or).
WITH latest AS (
    SELECT latest_attempt_id FROM rollouts WHERE rollout_id = $rollout_id
),

-- Where the rollout's spans lie in the spans stream (every span row is counted in its attempt's activity, by the
-- index on rollout_id): DuckDB then reads only the spans row groups of that range (zone maps on seq), not the table.
bounds AS (
    SELECT min(first_seq) AS lo, max(last_seq) AS hi FROM attempt_activity WHERE rollout_id = $rollout_id
),

scoped AS (
    SELECT spans.* FROM spans, bounds
    WHERE spans.seq BETWEEN bounds.lo AND bounds.hi
        AND rollout_id = $rollout_id
        AND (
            $attempt_scope = 'all'
            OR ($attempt_scope = 'latest' AND attempt_id = (SELECT latest_attempt_id FROM latest))
            OR ($attempt_scope = 'one' AND attempt_id = $attempt_id)
        )
),

conditions AS (
    SELECT
        *,
        CASE WHEN $use_trace_id THEN trace_id = $trace_id END AS c1,
        CASE WHEN $use_trace_id_contains THEN contains(trace_id, $trace_id_contains) END AS c2,
        CASE WHEN $use_span_id THEN span_id = $span_id END AS c3,
        CASE WHEN $use_span_id_contains THEN contains(span_id, $span_id_contains) END AS c4,
        -- a root span (no parent) fails a parent filter, as in Agent Lightning, instead of ignoring it
        CASE WHEN $use_parent_id THEN coalesce(parent_id = $parent_id, FALSE) END AS c5,
        CASE WHEN $use_parent_id_contains THEN coalesce(contains(parent_id, $parent_id_contains), FALSE) END AS c6,
        CASE WHEN $use_name THEN name = $name END AS c7,
        CASE WHEN $use_name_contains THEN contains(name, $name_contains) END AS c8
    FROM scoped
),

matching AS (
    SELECT * FROM conditions
    WHERE CASE
        WHEN $logic = 'or' THEN $no_filter
            OR coalesce(c1, FALSE) OR coalesce(c2, FALSE) OR coalesce(c3, FALSE) OR coalesce(c4, FALSE)
            OR coalesce(c5, FALSE) OR coalesce(c6, FALSE) OR coalesce(c7, FALSE) OR coalesce(c8, FALSE)
        ELSE coalesce(c1, TRUE) AND coalesce(c2, TRUE) AND coalesce(c3, TRUE) AND coalesce(c4, TRUE)
            AND coalesce(c5, TRUE) AND coalesce(c6, TRUE) AND coalesce(c7, TRUE) AND coalesce(c8, TRUE)
    END
),

page AS (
    SELECT * EXCLUDE (c1, c2, c3, c4, c5, c6, c7, c8), row_number() OVER (ORDER BY {order}) AS page_position FROM matching
    ORDER BY page_position
    LIMIT $limit OFFSET $offset
),

totals AS (
    SELECT count(*) AS total FROM matching
),

final AS (
    SELECT page.*, totals.total FROM totals LEFT JOIN page ON TRUE
    ORDER BY page.page_position
)

SELECT * FROM final;

-- name: query_resources
-- Resources bundles (the newest version of each, in Agent Lightning's field names) matching the id filters (and).
WITH newest AS (
    SELECT
        name AS resources_id,
        version,
        resources,
        min(created_at) OVER (PARTITION BY name) AS create_time,
        created_at AS update_time
    FROM resources
    QUALIFY row_number() OVER (PARTITION BY name ORDER BY version DESC) = 1
),

matching AS (
    SELECT * FROM newest
    WHERE (NOT $use_id OR resources_id = $resources_id)
        AND (NOT $use_contains OR contains(resources_id, $resources_id_contains))
),

page AS (
    SELECT *, row_number() OVER (ORDER BY {order}) AS page_position FROM matching
    ORDER BY page_position
    LIMIT $limit OFFSET $offset
),

totals AS (
    SELECT count(*) AS total FROM matching
),

final AS (
    SELECT page.*, totals.total FROM totals LEFT JOIN page ON TRUE
    ORDER BY page.page_position
)

SELECT * FROM final;

-- name: query_workers
-- Workers matching the status/id filters (and/or); one page plus the total.
WITH conditions AS (
    SELECT
        *,
        CASE WHEN $use_status_in THEN list_contains($status_in, status) END AS by_status,
        CASE WHEN $use_worker_id_contains THEN contains(worker_id, $worker_id_contains) END AS by_contains
    FROM workers
),

matching AS (
    SELECT * FROM conditions
    WHERE CASE
        WHEN $logic = 'or' THEN $no_filter OR coalesce(by_status, FALSE) OR coalesce(by_contains, FALSE)
        ELSE coalesce(by_status, TRUE) AND coalesce(by_contains, TRUE)
    END
),

page AS (
    SELECT * EXCLUDE (by_status, by_contains), row_number() OVER (ORDER BY {order}) AS page_position FROM matching
    ORDER BY page_position
    LIMIT $limit OFFSET $offset
),

totals AS (
    SELECT count(*) AS total FROM matching
),

final AS (
    SELECT page.*, totals.total FROM totals LEFT JOIN page ON TRUE
    ORDER BY page.page_position
)

SELECT * FROM final;

-- name: statistics
-- Agent Lightning's statistics() counts, as projected: rollouts, resources bundles (ids, as Agent Lightning counts them:
-- not versions), workers, attempts and spans. Cheap at any size, where the log gives the first three only by listing
-- every rollout's subjects (docs/control-plane.md).
SELECT
    (SELECT count(*) FROM rollouts) AS total_rollouts,
    (SELECT count(DISTINCT name) FROM resources) AS total_resources,
    (SELECT count(*) FROM workers) AS total_workers,
    (SELECT count(*) FROM attempts) AS total_attempts,
    (SELECT count(*) FROM spans) AS total_spans;

-- name: spans_of_finished
-- Every span of a few finished rollouts, fetched together by a store client when its caller asks for the spans of
-- one of them, $anchor (Agent Lightning's algorithms query each finished rollout's spans in turn); with whether the
-- span's attempt is its rollout's latest, in query_spans's default order within each rollout.
-- Read as query_spans reads one rollout's: the rows in the range of stream positions of their activity (a batch finished
-- together lies in a recent range), the rollouts by their key's index. A rollout whose spans lie more than $near
-- positions from the anchor's is not read (one old rollout among new ones would stretch the range over the whole
-- table): it comes back as a row with `deferred` true and only its id, to be fetched with its own neighbours.
WITH each_range AS (
    SELECT rollout_id, min(first_seq) AS lo, max(last_seq) AS hi FROM attempt_activity
    WHERE list_contains($rollout_ids, rollout_id)
    GROUP BY rollout_id
),

anchor AS (
    SELECT coalesce(min(lo), 0) AS lo, coalesce(max(hi), 0) AS hi FROM each_range WHERE rollout_id = $anchor
),

far AS (
    SELECT each_range.rollout_id FROM each_range, anchor
    WHERE each_range.rollout_id <> $anchor AND (each_range.hi < anchor.lo - $near OR each_range.lo > anchor.hi + $near)
),

bounds AS (
    SELECT min(lo) AS lo, max(hi) AS hi FROM each_range WHERE rollout_id NOT IN (SELECT rollout_id FROM far)
),

picked AS (
    SELECT rollout_id, latest_attempt_id FROM rollouts WHERE list_contains($rollout_ids, rollout_id)
)

SELECT spans.*, spans.attempt_id IS NOT DISTINCT FROM picked.latest_attempt_id AS latest, FALSE AS deferred
FROM spans
JOIN bounds ON spans.seq BETWEEN bounds.lo AND bounds.hi
JOIN picked USING (rollout_id)
WHERE list_contains($rollout_ids, spans.rollout_id) AND spans.rollout_id NOT IN (SELECT rollout_id FROM far)
UNION ALL BY NAME
SELECT rollout_id, TRUE AS deferred FROM far
ORDER BY rollout_id, sequence_id NULLS LAST, seq, seq_index;
