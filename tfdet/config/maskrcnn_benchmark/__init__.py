"""maskrcnn-benchmark (and the DA fork's) YAML files translated into our Detectron config when loaded: the fork's
defaults (`defaults`), what each of its keys does (`rules`: mapped, ignored with a reason, or refused) and the
translation with its report (`translation`)."""
