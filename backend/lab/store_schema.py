"""The run store's schema: numbered migrations (the one declaration of every table and column; the
store reads the column types back from the migrated file), and the names of run kinds and statuses.

Knows nothing about connections or queries: store.py applies these and reads and writes the tables.
"""

MIGRATIONS: list[tuple[int, str]] = [
    (
        1,
        """
        CREATE TABLE runs (
            run_id VARCHAR PRIMARY KEY,
            group_id VARCHAR,               -- the lanes of one comparison share a group
            lane INTEGER,
            kind VARCHAR NOT NULL,          -- generate | compare | replay | baseline | bench
            status VARCHAR NOT NULL,        -- running | complete | cancelled | failed | incomplete
            created_at TIMESTAMP NOT NULL,
            finished_at TIMESTAMP,
            turns JSON NOT NULL,            -- the user turns, as a JSON list of strings
            question_id VARCHAR,
            category VARCHAR,
            target VARCHAR NOT NULL,
            target_fingerprint VARCHAR,
            drafter VARCHAR NOT NULL,
            drafter_options JSON,
            draft_len VARCHAR NOT NULL,     -- an integer D, or 'auto'
            temperature DOUBLE,
            top_p DOUBLE,
            top_k INTEGER,
            seed BIGINT,
            max_new_tokens INTEGER,
            device VARCHAR,
            dtype VARCHAR,
            torch_version VARCHAR,
            transformers_version VARCHAR,
            prompt_tokens INTEGER,
            new_tokens INTEGER,
            al DOUBLE,
            acceptance_rate DOUBLE,
            tokens_per_s DOUBLE,
            decode_s DOUBLE,
            prefill_s DOUBLE,
            baseline_tokens_per_s DOUBLE,
            output_text VARCHAR,
            finish_reason VARCHAR,
            error VARCHAR
        );
        CREATE TABLE steps (
            run_id VARCHAR NOT NULL,
            turn INTEGER NOT NULL,
            step_index INTEGER NOT NULL,
            draft_len INTEGER,
            drafted INTEGER[],
            draft_probs DOUBLE[],
            target_probs DOUBLE[],
            accepted INTEGER,
            target_token INTEGER,
            target_token_prob DOUBLE,
            emitted INTEGER[],
            draft_s DOUBLE,
            verify_s DOUBLE,
            stop_reason VARCHAR,
            finish_reason VARCHAR,
            drafted_text VARCHAR[],         -- each token decoded alone, for display
            emitted_text VARCHAR[],
            target_text VARCHAR
        );
        CREATE INDEX steps_by_run ON steps (run_id);
    """,
    ),
    (
        2,
        """
        ALTER TABLE runs ADD COLUMN batch_size INTEGER;
        ALTER TABLE runs ADD COLUMN split VARCHAR;     -- prompt length split: short, medium, long
        CREATE TABLE sweeps (
            sweep_id VARCHAR PRIMARY KEY,
            created_at TIMESTAMP NOT NULL,
            finished_at TIMESTAMP,
            status VARCHAR NOT NULL,
            target VARCHAR NOT NULL,
            target_fingerprint VARCHAR,
            device VARCHAR,
            settings JSON                  -- suite, drafters, draft lengths, batch sizes, tokens
        );
        CREATE TABLE sweep_points (
            sweep_id VARCHAR NOT NULL,
            drafter VARCHAR NOT NULL,
            draft_len VARCHAR NOT NULL,
            batch_size INTEGER NOT NULL,
            category VARCHAR NOT NULL,      -- 'all', or one category
            split VARCHAR NOT NULL,         -- 'all', or one prompt-length split
            prompts INTEGER,
            new_tokens INTEGER,
            wall_s DOUBLE,
            throughput_tps DOUBLE,          -- generated tokens/s across the batch, prefill included
            decode_throughput_tps DOUBLE,
            interactivity_tps DOUBLE,       -- tokens/s per user = 1 / mean TPOT
            ttft_s DOUBLE,
            al DOUBLE,
            al_ci_low DOUBLE,
            al_ci_high DOUBLE,
            acceptance_rate DOUBLE,
            histogram INTEGER[],
            survival DOUBLE[],
            conditional DOUBLE[],
            draft_s_mean DOUBLE,
            verify_s_mean DOUBLE,
            rho DOUBLE,
            lossless BOOLEAN
        );
    """,
    ),
    (
        3,
        """
        ALTER TABLE runs ADD COLUMN compile VARCHAR;  -- on | off: the target's passes compiled or eager
        ALTER TABLE sweep_points ADD COLUMN compile VARCHAR;
    """,
    ),
    (
        4,
        """
        ALTER TABLE runs ADD COLUMN specscope_version VARCHAR;  -- the worker's package version
        ALTER TABLE runs ADD COLUMN git_commit VARCHAR;         -- its checkout's commit; NULL outside git
        ALTER TABLE sweep_points ADD COLUMN specscope_version VARCHAR;
        ALTER TABLE sweep_points ADD COLUMN git_commit VARCHAR;
    """,
    ),
    (
        5,
        """
        ALTER TABLE runs ADD COLUMN variant VARCHAR;  -- what a sweep varied besides D and B: 'T=0.7, ngram_max=2'
        ALTER TABLE sweep_points ADD COLUMN variant VARCHAR;
        ALTER TABLE sweep_points ADD COLUMN temperature DOUBLE;
        ALTER TABLE sweep_points ADD COLUMN drafter_options JSON;
        ALTER TABLE sweeps ADD COLUMN reference VARCHAR;  -- a shipped reference sweep's label; NULL: the user's
    """,
    ),
    (
        6,
        """
        ALTER TABLE sweeps ADD COLUMN engine VARCHAR;          -- NULL: SpecScope's engine; else vllm, sglang, ...
        ALTER TABLE sweeps ADD COLUMN engine_version VARCHAR;  -- as the server reports it
        ALTER TABLE sweeps ADD COLUMN engine_config JSON;      -- URL or launch command, method, served model
        ALTER TABLE sweep_points ADD COLUMN ttft_s_p90 DOUBLE;
        ALTER TABLE sweep_points ADD COLUMN tpot_s_p50 DOUBLE; -- time per output token, per request
        ALTER TABLE sweep_points ADD COLUMN tpot_s_p90 DOUBLE;
        ALTER TABLE sweep_points ADD COLUMN al_from VARCHAR;   -- where an engine's AL came from (measure.py)
        ALTER TABLE sweep_points ADD COLUMN status VARCHAR;    -- NULL or 'measured'; 'failed' with its error
        ALTER TABLE sweep_points ADD COLUMN error VARCHAR;
    """,
    ),
    (
        7,
        """
        ALTER TABLE runs ADD COLUMN tree_budget INTEGER;    -- nodes of a tree draft per step; 0 = chains
        ALTER TABLE runs ADD COLUMN tree_topk INTEGER;      -- children per tree node (NULL for chains)
        ALTER TABLE steps ADD COLUMN parents INTEGER[];     -- a tree step: each drafted node's parent, -1 = root
        ALTER TABLE steps ADD COLUMN accepted_path INTEGER[];  -- a tree step: the kept nodes, in order
        ALTER TABLE steps ADD COLUMN tree_depth INTEGER;    -- a tree step: its deepest node's depth
        ALTER TABLE sweep_points ADD COLUMN tree_budget INTEGER;  -- 0: chains (also in the variant, 'tree=16')
    """,
    ),
    (
        8,
        """
        ALTER TABLE runs ADD COLUMN min_confidence DOUBLE;          -- a chain's confidence stop (0 = none)
        ALTER TABLE sweep_points ADD COLUMN min_confidence DOUBLE;  -- also in the variant, 'conf=0.35'
    """,
    ),
    (
        9,
        """
        ALTER TABLE runs ADD COLUMN cpu_features VARCHAR[];          -- the CPU's matrix features; [] off the CPU
        ALTER TABLE sweep_points ADD COLUMN dtype VARCHAR;           -- the target's precision: float32, bfloat16
        ALTER TABLE sweep_points ADD COLUMN cpu_features VARCHAR[];
    """,
    ),
]
RUN_KINDS = ("generate", "compare", "replay", "sweep", "reference")  # 'generate' is a Live run
RUN_STATUSES = ("complete", "cancelled", "incomplete", "failed")
DEFAULT_KINDS = ("generate", "compare", "sweep")  # replay scores a stored rollout; reference is shipped data
DEFAULT_STATUSES = ("complete", "incomplete")  # a cancelled run stopped where the user chose
TABLES = ("runs", "steps", "sweep_points")  # written in bulk with the column types the migrations declared

FINAL_FIELDS = {
    "status",
    "finished_at",
    "new_tokens",
    "al",
    "acceptance_rate",
    "tokens_per_s",
    "decode_s",
    "prefill_s",
    "baseline_tokens_per_s",
    "output_text",
    "finish_reason",
    "error",
    "prompt_tokens",
}
