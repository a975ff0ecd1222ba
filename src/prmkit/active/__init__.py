"""Active learning and synthetic supervision: select convincing samples, label them from
one of several sources, retrain, repeat (`prmkit active run`)."""
