#pragma once
// strata-header: host-only
// Hugging Face transformers folders: export (hf/export.hpp) and import (hf/import.hpp) of
// GPT2LMHeadModel and LlamaForCausalLM models (hf/family.hpp), from and into any plan.
#include "strata/hf/export.hpp"
#include "strata/hf/import.hpp"
