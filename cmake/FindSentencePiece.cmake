# FindSentencePiece: Google's SentencePiece tokenizer library (Debian: libsentencepiece-dev).
# Used by strata's build and installed with its package (strataConfig.cmake's optional
# component sentencepiece). pkg-config's sentencepiece.pc, when there, only gives hints.
#
# Defines SentencePiece_FOUND, SentencePiece_VERSION (from pkg-config, else empty) and
#   SentencePiece::sentencepiece   encoding and decoding (libsentencepiece)
#   SentencePiece::train           training (libsentencepiece_train; links the former)
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_SentencePiece QUIET sentencepiece)
endif()
find_path(SentencePiece_INCLUDE_DIR sentencepiece_processor.h HINTS ${PC_SentencePiece_INCLUDE_DIRS})
find_library(SentencePiece_LIBRARY sentencepiece HINTS ${PC_SentencePiece_LIBRARY_DIRS})
find_library(SentencePiece_TRAIN_LIBRARY sentencepiece_train HINTS ${PC_SentencePiece_LIBRARY_DIRS})
mark_as_advanced(SentencePiece_INCLUDE_DIR SentencePiece_LIBRARY SentencePiece_TRAIN_LIBRARY)
set(SentencePiece_VERSION "${PC_SentencePiece_VERSION}")

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(SentencePiece
  REQUIRED_VARS SentencePiece_LIBRARY SentencePiece_TRAIN_LIBRARY SentencePiece_INCLUDE_DIR)

if(SentencePiece_FOUND AND NOT TARGET SentencePiece::sentencepiece)
  add_library(SentencePiece::sentencepiece UNKNOWN IMPORTED)
  set_target_properties(SentencePiece::sentencepiece PROPERTIES
    IMPORTED_LOCATION "${SentencePiece_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${SentencePiece_INCLUDE_DIR}")
  add_library(SentencePiece::train UNKNOWN IMPORTED)
  set_target_properties(SentencePiece::train PROPERTIES
    IMPORTED_LOCATION "${SentencePiece_TRAIN_LIBRARY}"
    INTERFACE_LINK_LIBRARIES SentencePiece::sentencepiece)
endif()
