// Stands in for ANTLR's umbrella header "antlr4-runtime.h", which the
// generated parser (GdlLexer.h, GdlParser.h, ...) and parse_support.h
// include: this directory comes first on their include path (CMakeLists.txt,
// gdl_antlr_parser), so they get this list of what they use instead.
//
// Why: the umbrella of the ANTLR 4.9 C++ runtime in Debian 12 also includes
// misc/InterpreterDataReader.h, whose inline `InterpreterData() {}` default-
// constructs a dfa::Vocabulary, whose defaulted default constructor is
// deleted (it has const std::vector members). GCC accepts that; clang
// rejects it, so clang could not build the parser. gdl never reads ANTLR's
// interpreter data, and the headers below do not include that one.
#pragma once

#include <antlr4-runtime/antlr4-common.h>

#include <antlr4-runtime/ANTLRInputStream.h>
#include <antlr4-runtime/BaseErrorListener.h>
#include <antlr4-runtime/CommonTokenStream.h>
#include <antlr4-runtime/DefaultErrorStrategy.h>
#include <antlr4-runtime/FailedPredicateException.h>
#include <antlr4-runtime/InputMismatchException.h>
#include <antlr4-runtime/Lexer.h>
#include <antlr4-runtime/NoViableAltException.h>
#include <antlr4-runtime/Parser.h>
#include <antlr4-runtime/ParserRuleContext.h>
#include <antlr4-runtime/Vocabulary.h>
#include <antlr4-runtime/atn/ATN.h>
#include <antlr4-runtime/atn/ATNDeserializer.h>
#include <antlr4-runtime/atn/LexerATNSimulator.h>
#include <antlr4-runtime/atn/ParserATNSimulator.h>
#include <antlr4-runtime/atn/PredictionContext.h>  // PredictionContextCache
#include <antlr4-runtime/atn/PredictionMode.h>
#include <antlr4-runtime/dfa/DFA.h>
#include <antlr4-runtime/misc/IntervalSet.h>
#include <antlr4-runtime/tree/AbstractParseTreeVisitor.h>
#include <antlr4-runtime/tree/TerminalNode.h>
