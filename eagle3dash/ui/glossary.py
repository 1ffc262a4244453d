"""The words the pages use that a newcomer may not know, each said once in plain words: the hover
help of the tables and charts that use them, and the Run page's glossary (docs/glossary.md)."""

from __future__ import annotations

GLOSSARY = {
    "taps": (
        "The points in the target model where hidden states are read: the embedding output "
        "(tap 0) or the output of decoder block d (tap d). An EAGLE-3 draft reads three taps."
    ),
    "fc slot": (
        "One of the draft's fc inputs: the draft concatenates the states of its taps in a fixed "
        "order, slot 0, 1, 2, before its first layer (the fc). A slot fed another tap than in "
        "training sees states it never learnt."
    ),
    "top-1": (
        "How often the draft's first guess equals the target's next token, over the captured "
        "positions: draft step 1's accuracy."
    ),
    "sim training / sim serving": (
        "The simulated accept length of the standalone draft: its verify rounds replayed on the "
        "states of the taps training fed it (sim training) or of the taps the server feeds it "
        "(sim serving). A gap between them is what the layout costs; measured close to sim "
        "serving, the server behaves as simulated."
    ),
    "accept length": (
        "Tokens emitted per verify round: 1 + the drafts accepted in a row (SGLang's "
        "'accept len'). Simulated by replaying the rounds with the standalone draft, measured "
        "from the server's counters."
    ),
    "margin": (
        "How clearly a served slot matches its best tap: the best tap's match score minus the "
        "second best's (the detective says 'its score 0.34 above the next tap's'). Near 0 the two "
        "taps look alike and the match is uncertain."
    ),
    "tied": (
        "A margin under 0.01 (the detective says 'undecided: another tap matches as well'): two "
        "taps match a slot equally well, so which one it carries is not decided by the states "
        "alone."
    ),
    "behind the best": (
        "How far a candidate layout's simulated accept length falls short of the best "
        "candidate's, on the same capture."
    ),
    "id conventions": (
        "How a config's layer ids name taps. hf-index: id i is hidden_states[i] of transformers "
        "(0 = the embedding output), so tap i. output-of: id i is the output of block i "
        "(SGLang and SpecForge count from 0), so tap i + 1. input-of: id i is the input of "
        "block i, so tap i. The same ids [0, 1, 2] are taps 0, 1, 2 in one convention and taps "
        "1, 2, 3 in another: the demo's incident."
    ),
}


def term_help(*terms: str) -> str:
    """The hover help for the terms a table or chart uses: 'top-1: ... margin: ...'."""
    return "\n\n".join(f"**{term}**: {GLOSSARY[term]}" for term in terms)


def glossary_section() -> None:
    """The Run page's glossary: every term, in an expander at the end."""
    import streamlit as st

    with st.expander("Glossary: the words on this page"):
        for term, meaning in GLOSSARY.items():
            st.markdown(f"**{term}**: {meaning}")
