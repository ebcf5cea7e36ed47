"""Average the weights of the last N Lightning checkpoints (T2T avg_checkpoints; CoDA paper Table 4).

    python scripts/average_checkpoints.py --dir RUN/checkpoints --last 5 --out RUN/checkpoints/averaged.ckpt
    python scripts/average_checkpoints.py --ckpts a.ckpt b.ckpt c.ckpt --out averaged.ckpt

"Last" is by the global_step stored in each checkpoint. See coda_exp/checkpoint_avg.py.
"""

from coda_exp.checkpoint_avg import main

if __name__ == "__main__":
    main()
